"""Real MCP servers the tests start: over stdio (run as a script) and over streamable HTTP."""
