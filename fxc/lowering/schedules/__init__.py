"""Schedules per target family: `cpu` (vector register tiles, cpu/) and `gpu` (device launches, gpu/)."""
