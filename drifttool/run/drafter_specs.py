"""`[NAME=]DIR[?flag=value&...]` drafter specs as the command line gives them, checked as text (names unique, each
override key a known one), without torch: a mistyped flag is refused in a second, before any model loads
(run/drafters.py loads them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DriftError
from ..model.config import check_override_key


@dataclass
class DrafterSpec:
    """`[NAME=]DIR[?flag=value&flag=value]` on the command line."""

    name: str
    path: str
    overrides: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, common: dict[str, str] | None = None) -> DrafterSpec:
        name, path = (text.split("=", 1) if "=" in text.split("?", 1)[0] else (None, text))
        path, _, query = path.partition("?")
        ov, own = dict(common or {}), set()
        for kv in filter(None, query.split("&")):
            k, eq, v = kv.partition("=")
            if not eq:
                raise DriftError(f"--drafter {text}: override {kv!r} must look like flag=value")
            if k in own:
                raise DriftError(f"--drafter {text}: gives override {k!r} twice; give each flag once")
            own.add(k)
            check_override_key(k, f"--drafter {text}: override")
            ov[k] = v  # the drafter's own override wins over a common --override of the same flag
        p = Path(path)
        return cls(name or (p.name + ("+" + "+".join(f"{k}={v}" for k, v in ov.items()) if ov else "")), path, ov)


def parse_overrides(items: list[str], where: str = "--override") -> dict[str, str]:
    out = {}
    for kv in items or []:
        k, eq, v = kv.partition("=")
        if not eq or not k:
            raise DriftError(f"{where} {kv!r}: expected flag=value, e.g. norm_output=true")
        if k.strip() in out:
            raise DriftError(f"{where} {kv!r}: gives {k.strip()!r} twice ({k.strip()}={out[k.strip()]} before); "
                             "give each flag once")
        check_override_key(k.strip(), where)
        out[k.strip()] = v.strip()
    return out


def check_drafters(drafters: list) -> None:
    if not drafters:
        raise DriftError("--drafter: give at least one drafter checkpoint folder")
    names = [d.name for d in drafters]
    colon = [n for n in names if ":" in n]
    if colon:  # ':' separates a trace from a drafter in every series label: x:e3 and y:e3 both read as e3
        raise DriftError(f"--drafter: drafter name {colon[0]!r} contains ':', which separates trace and drafter in "
                         "series labels; rename it (NAME=DIR) or its series folder")
    if len(set(names)) != len(names):
        raise DriftError(f"--drafter: duplicate drafter names {names}; name them NAME=DIR")
