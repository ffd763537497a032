"""DRIFTTOOL_MONITOR="sample=0.01,dir=/var/lib/drifttool": the monitor's one switch, checked whole before vLLM
starts, so a wrong setting is one line and the server does not start half-configured."""

from __future__ import annotations

import os
import re
import stat
import sys
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

from ..errors import DriftError

ENV = "DRIFTTOOL_MONITOR"


@dataclass(frozen=True)
class MonitorSettings:
    sample: float  # fraction of requests recorded, in (0, 1]
    dir: Path  # spool/, segments/ and metrics/ live here
    name: str = ""  # the drafter label on every series (default: the drafter folder's name)
    queue: int = 8  # finished sampled requests waiting for the spool thread; more are dropped and counted
    spool: int = 64  # spooled requests waiting for the replay; more are dropped and counted
    segment_requests: int = 256  # requests per trace segment before a new one starts
    keep_segments: int = 24  # segments kept (oldest removed first)
    max_bytes: int = 1 << 30  # all segments together at most this (oldest removed first)
    threads: int = 1  # torch threads of the replay process
    every: float = 0.0  # seconds: at least one request recorded this often (0: off)
    long: int = 0  # tokens: every request whose prompt has at least this many is recorded (0: off)

    @classmethod
    def parse(cls, text: str, probe: bool = True) -> MonitorSettings:
        """`key=value` pairs separated by commas; every key checked, the folder created and written to (`probe`;
        the replay process, started by a server that probed already, does not: a full disk must not stop it)."""
        kv = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, eq, value = part.partition("=")
            if not eq or not value.strip():
                raise DriftError(f"{ENV}: {part!r} is not key=value (e.g. sample=0.01,dir=/var/lib/drifttool)")
            if key.strip() in kv:
                raise DriftError(f"{ENV}: gives {key.strip()!r} twice; give each setting once")
            kv[key.strip()] = value.strip()
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(kv) - set(known))
        if unknown:
            raise DriftError(f"{ENV}: unknown setting {unknown[0]!r} (expected one of {', '.join(known)})")
        missing = [k for k in ("sample", "dir") if k not in kv]
        if missing:
            raise DriftError(f"{ENV}: {missing[0]}= is required (e.g. sample=0.01,dir=/var/lib/drifttool)")
        s = cls(**{k: _value(k, v, known[k].type) for k, v in kv.items()})
        s.check(kv, probe)
        return s

    def check(self, given: dict[str, str] | None = None, probe: bool = True) -> None:
        """Ranges and the folder; a refused value is shown as given (`given`: the setting's text) where known."""
        shown = lambda k: (given or {}).get(k, repr(getattr(self, k)))  # noqa: E731
        if not 0 < self.sample <= 1:
            raise DriftError(f"{ENV}: sample={shown('sample')} is outside (0, 1] (the fraction of requests "
                             "recorded)")
        for k in ("queue", "spool", "segment_requests", "keep_segments", "max_bytes", "threads"):
            if getattr(self, k) < 1:
                raise DriftError(f"{ENV}: {k}={shown(k)} must be at least 1")
        for k in ("every", "long"):
            if not getattr(self, k) >= 0:  # NaN too
                raise DriftError(f"{ENV}: {k}={shown(k)} must be 0 (off) or more")
        if probe:
            writable(self.dir)

    def to_env(self) -> str:
        return ",".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self) if getattr(self, f.name) != "")


HELP = {  # each setting in words (docs/monitor.md's table is generated from this and the defaults)
    "sample": "fraction of requests recorded, in (0, 1] (required)",
    "dir": "folder for spool/, segments/ and metrics/ (required; created private to the server's user; an existing "
           "one others can read is tightened to 0700, one others can write or another user owns is refused)",
    "name": "the drafter label on every series (default: the drafter folder's name)",
    "queue": "finished sampled requests waiting to be spooled; more are dropped and counted",
    "spool": "spooled requests waiting for the replay; more are dropped and counted",
    "segment_requests": "requests per trace segment before the next one starts",
    "keep_segments": "segments kept (oldest removed first)",
    "max_bytes": "all segments together at most this many bytes (oldest removed first)",
    "threads": "torch threads of the replay process",
    "every": "seconds: at least one request is recorded this often whatever `sample` draws (0: off); its segments "
             "say `sample:cadence`",
    "long": "tokens: every request whose prompt has at least this many is recorded (0: off); its segments say "
            "`sample:long`",
}


def describe() -> list[dict[str, str]]:
    return [{"setting": f.name, "default": "-" if f.default is MISSING else str(f.default) or '""',
             "what": HELP[f.name]} for f in fields(MonitorSettings)]


def _value(key: str, value: str, kind) -> object:
    kind = str(kind)
    if "float" in kind:
        try:
            return float(value)
        except ValueError:
            raise DriftError(f"{ENV}: {key}={value} is not a number (expected e.g. {key}=0.01)") from None
    if "int" in kind:
        if not re.fullmatch(r"[+-]?[0-9]{1,19}", value):  # not 1e3, 1.5, 8.0 or '²': a count is written as digits
            raise DriftError(f"{ENV}: {key}={value}: expected an integer (digits only, e.g. {key}=8)")
        return int(value)
    return Path(value).expanduser() if key == "dir" else value


def writable(path: Path) -> None:
    """The monitor's folder exists (created, private to the server's user: segments hold token ids) and takes a
    file; else one line naming it. A folder that was there already is the server user's own (else refused) and
    private: one other users could read or write is tightened to 0700, said in one line."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        private(path)
        probe = path / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise DriftError(f"{ENV}: dir={path} is not a writable folder ({e.strerror or e})") from None


def private(path: Path) -> None:
    """`path` (a folder) owned by this user and closed to others: one another user could write to is refused (what
    they planted could be replayed or served on /metrics); one they could only read is tightened to 0700, said so."""
    st = path.stat()
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise DriftError(f"{ENV}: dir={path} is owned by user id {st.st_uid}, not the server's ({os.geteuid()}); "
                         "expected a private folder of the server's user (segments hold token ids)")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise DriftError(f"{ENV}: dir={path} can be written by other users (mode {mode:o}); expected a private folder "
                         f"(chmod 700 {path}, or give a new path: it is created private)")
    if mode & 0o077:
        path.chmod(0o700)
        print(f"drifttool monitor: {ENV}: dir={path} was readable by other users (mode {mode:o}); tightened to 0700 "
              "(segments hold token ids)", file=sys.stderr, flush=True)


def from_env(environ=os.environ) -> MonitorSettings | None:
    """The settings when the switch is set, else None (the monitor stays out of the way)."""
    text = environ.get(ENV, "").strip()
    return MonitorSettings.parse(text) if text else None
