"""The TUI's widgets, grouped by feature: header, frontier tree, timing matrix, loop log,
candidate details."""
