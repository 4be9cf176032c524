"""The incident page: one self-contained HTML file that shows what happened, for a person and a ticket.

`timeline` lays an incident and its verdict out as plain data (rows per pod grouped by node, events on
one clock, victims that say the same thing folded into bands); `render` turns that into HTML with
inline CSS and SVG and no script; `cluster` rebuilds the incident from what `kubectl` can read of a live
job. `podmortem analyze --html`, `podmortem demo --keep` and `kubectl podmortem explain --html` write it.
"""
