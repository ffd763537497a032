"""Helpers the tests share: tiny models on disk, checkpoint writers, independent reference forwards, the trained tiny pair."""
