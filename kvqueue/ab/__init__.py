"""The A/B question: a paired comparison of variants (collect: ``make bench`` /
``make quick`` / ``make check-queue``; analyze; present)."""
