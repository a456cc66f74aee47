"""schedule: recurring events from plain-English rules, time intervals, and business-day arithmetic."""

from schedule.business import BusinessCalendar
from schedule.intervals import Interval, free_slots, merge, parse_interval, total_duration
from schedule.occurrences import iter_occurrences, next_occurrence, occurrences, occurrences_between
from schedule.rules import Rule, RuleError, parse_rule

__all__ = [
    "BusinessCalendar",
    "Interval",
    "Rule",
    "RuleError",
    "free_slots",
    "iter_occurrences",
    "merge",
    "next_occurrence",
    "occurrences",
    "occurrences_between",
    "parse_interval",
    "parse_rule",
    "total_duration",
]
