"""Workload items and arrival schedules."""
