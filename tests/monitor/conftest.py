"""The monitor tests' shared fixture: a tiny target, its EAGLE-3 drafter and four recorded requests."""

from tests.monitor.test_monitor_offline import served  # noqa: F401 - a fixture, registered by the import
