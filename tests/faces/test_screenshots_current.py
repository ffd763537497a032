"""The docs' dashboard screenshots show the pages as they are (issue #53, item 5): each one's page module and plot
builders hash to what they were when scripts/screenshots.py took it; a page changed since fails here, naming the
command that regenerates the screenshots."""

from __future__ import annotations

from drifttool.dashboard import shots


def test_every_screenshot_is_newer_than_the_page_it_shows():
    assert not shots.stale(), "\n".join(shots.stale())


def test_a_changed_page_makes_its_screenshot_stale(monkeypatch):
    real = shots.code_hash
    monkeypatch.setattr(shots, "code_hash", lambda page: real(page) + ("x" if page == "heads" else ""))
    assert any(s.startswith("docs/dashboard/heads.png: older than drifttool/dashboard/app_pages/heads.py")
               for s in shots.stale())
