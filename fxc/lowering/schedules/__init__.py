"""Schedules per target family: `gpu` (device launches). The CPU's schedules live beside lower.py."""
