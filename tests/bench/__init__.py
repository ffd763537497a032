"""Smoke tests of bench/."""
