"""Pure decisions: no Git, no I/O. Each takes facts and returns a verdict."""
