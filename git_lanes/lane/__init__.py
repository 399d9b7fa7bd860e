"""The lane side: the commands run inside a lane (`task`, `done`, `inbox`) and the records as data."""
