"""One trial: measure a config, its outcome, the break-even and SLO verdicts, and the winner policy."""
