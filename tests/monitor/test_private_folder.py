"""The monitor's folder is private, as the docs promise (issue #51, item 9; #52): a pre-existing folder other users
can read is tightened to 0700 and said so in one line, one they can write or another user owns is refused, and what is read
from it is checked: a link planted in the metrics or spool folder is not followed."""

from __future__ import annotations

import json
import os
import stat

import pytest

from drifttool.errors import DriftError
from drifttool.monitor.metrics import exposition
from drifttool.monitor.replay_worker import pending


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o730, 0o702])
def test_a_folder_others_can_write_is_refused(tmp_path, mode):
    from drifttool.monitor.settings import MonitorSettings

    d = tmp_path / "mon"
    d.mkdir()
    d.chmod(mode)
    with pytest.raises(DriftError) as e:
        MonitorSettings.parse(f"sample=1,dir={d}")
    msg = str(e.value)
    assert str(d) in msg and f"{mode:o}" in msg and "written by other users" in msg and "\n" not in msg
    assert stat.S_IMODE(d.stat().st_mode) == mode  # left as it was: the operator decides


@pytest.mark.parametrize("mode", [0o755, 0o750, 0o705])
def test_a_folder_others_can_read_is_tightened_and_said_so(tmp_path, capsys, mode):
    from drifttool.monitor.settings import MonitorSettings

    d = tmp_path / "mon"
    d.mkdir()
    d.chmod(mode)
    MonitorSettings.parse(f"sample=1,dir={d}")
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and str(d) in err[0] and f"{mode:o}" in err[0] and "0700" in err[0], err
    MonitorSettings.parse(f"sample=1,dir={d}")  # private now: nothing to say
    assert not capsys.readouterr().err


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_folder_of_another_user_is_refused(tmp_path):
    from drifttool.monitor.settings import MonitorSettings

    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    with pytest.raises(DriftError) as e:
        MonitorSettings.parse(f"sample=1,dir={d}")
    assert str(d) in str(e.value) and "owned by" in str(e.value) and "\n" not in str(e.value)


def test_links_in_the_folder_are_not_followed(tmp_path):
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"counters": [{"name": "replayed", "labels": {}, "value": 99}]}))
    metrics = tmp_path / "mon" / "metrics"
    metrics.mkdir(parents=True)
    (metrics / "r-replay.json").symlink_to(outside)
    text = exposition(metrics, "r")
    assert "drifttool:replayed" not in text and "drifttool:metrics_files_skipped 1.0" in text
    spool = tmp_path / "mon" / "spool" / "r"
    spool.mkdir(parents=True)
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"key": "k", "prompt_ids": [1], "output_ids": [2], "t_end": 1.0}))
    (spool / "job-000000001.meta.json").symlink_to(meta)
    jobs = pending(spool, 16)
    assert len(jobs) == 1 and not isinstance(jobs[0].meta, dict)  # not read through the link: quarantined
