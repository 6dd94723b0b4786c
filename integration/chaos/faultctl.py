"""Client of walship-replica-faulty's fault channel (fault_syscalls.h).

    ctl = FaultControl(directory)      # created if missing
    replica = Replica(..., target=FAULTY_REPLICA, env=ctl.env())
    i = ctl.arm("torn-write")          # eio-fdatasync, eio-write, torn-write,
                                       # enospc-write, power-loss
    j = ctl.arm("eio-fdatasync", ".partial")  # only files ending so
    ctl.wait_fired(i, timeout=30)      # True once the fault triggered
    ctl.events()                       # [(id, state, kind, detail), ...]

Commands are written atomically (cmd.tmp renamed to cmd-<id>); the replica
answers in DIR/events with "<id> armed <kind>", "<id> fired <kind> <path>"
and "<id> error <why>" lines. After power-loss the replica ends with exit
status POWER_LOSS_EXIT (86).
"""

import os
import time

FAULTY_REPLICA = ("integration/chaos", "walship-replica-faulty")
POWER_LOSS_EXIT = 86
KINDS = ("eio-fdatasync", "eio-write", "torn-write", "enospc-write", "power-loss")


class FaultControl(object):
    """Arms faults in one walship-replica-faulty through `directory`."""

    def __init__(self, directory):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self._next = 1 + max([i for i, _, _, _ in self.events()] or [0])

    def env(self):
        return {"WALSHIP_FAULT_DIR": self.directory}

    def arm(self, kind, suffix=None):
        """Sends `kind` (any word: unknown ones get an error event), for
        files whose path ends in `suffix` if given (data faults only);
        returns its id, a monotonic int."""
        i = self._next
        self._next += 1
        tmp = os.path.join(self.directory, "cmd.tmp")
        with open(tmp, "w") as f:
            f.write(kind + (" " + suffix if suffix else "") + "\n")
        os.rename(tmp, os.path.join(self.directory, "cmd-%d" % i))
        return i

    def events(self):
        """Every event line so far as (id, state, kind, detail): state is
        armed, fired or error; for error, kind is the first word of the
        reason and detail the rest; detail is the path for fired, the suffix
        (or "") for armed."""
        path = os.path.join(self.directory, "events")
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            parts = line.split(" ", 3)
            if len(parts) < 3 or not parts[0].isdigit():
                continue
            out.append((int(parts[0]), parts[1], parts[2],
                        parts[3] if len(parts) > 3 else ""))
        return out

    def state(self, i):
        """The latest state of command `i` (armed, fired, error) or None."""
        states = [s for j, s, _, _ in self.events() if j == i]
        return states[-1] if states else None

    def wait_fired(self, i, timeout):
        """True once command `i` fired; False on timeout or an error event."""
        deadline = time.monotonic() + timeout
        while True:
            s = self.state(i)
            if s in ("fired", "error") or time.monotonic() > deadline:
                return s == "fired"
            time.sleep(0.01)
