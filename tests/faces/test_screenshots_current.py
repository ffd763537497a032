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


def test_a_screenshot_with_the_same_pixels_is_kept_and_a_changed_one_replaced(tmp_path):
    from PIL import Image

    dest, same, other = tmp_path / "dest.png", tmp_path / "same.png", tmp_path / "other.png"
    Image.new("RGB", (8, 4), (10, 20, 30)).save(dest)
    Image.new("RGB", (8, 4), (10, 20, 30)).save(same, compress_level=0)  # other bytes, the same pixels
    noisy, img = Image.new("RGB", (8, 4), (10, 20, 30)), Image.new("RGB", (8, 4), (10, 20, 30))
    noisy.putpixel((7, 3), (10, 20, 31))  # antialiasing noise between two renders of one page
    img.putpixel((7, 3), (10, 20, 90))  # a changed picture
    img.save(other)
    noisy.save(tmp_path / "noisy.png")
    before = dest.read_bytes()
    assert same.read_bytes() != before
    assert shots.keep_or_replace(same, dest) is False and dest.read_bytes() == before
    assert shots.keep_or_replace(tmp_path / "noisy.png", dest) is False and dest.read_bytes() == before
    assert shots.keep_or_replace(other, dest) is True and dest.read_bytes() == other.read_bytes()
    new = tmp_path / "new.png"
    assert shots.keep_or_replace(other, new) is True and new.is_file()
