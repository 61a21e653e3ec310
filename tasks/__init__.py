"""Task files bundled with kdatui (the same files as the repo's tasks/ folder)."""
