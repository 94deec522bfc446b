"""The control plane's HTTP API (FastAPI routers, mounted by the application factory)."""
