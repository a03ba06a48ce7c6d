"""Views: report, compare, show/export, html and why. Each reads the counts table (or the raw
outputs it points to) and none of them calls another."""
