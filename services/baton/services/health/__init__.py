"""The health service: node health verdicts, quarantine, drain, preflight (docs/health.md)."""
