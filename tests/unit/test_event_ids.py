"""Event ids: unguessable (96 bits from the OS's CSPRNG, read a block at a time), distinct, and
distinct in a forked child."""

from __future__ import annotations

import os
import re

from control_plane.sessions.events import new_event_id


def test_event_ids_are_distinct_and_well_formed() -> None:
    ids = [new_event_id() for _ in range(5000)]  # more than one block of randomness
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"sevt_[0-9a-f]{24}", i) for i in ids)


def test_a_forked_child_does_not_repeat_the_parents_ids() -> None:
    new_event_id()  # the parent holds a partly used block
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next id and leave at once
        os.write(write, new_event_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child != new_event_id()
