"""One module per section; each has TITLES and run(ctx, *sections)."""
