"""The vocabulary every layer speaks, without effects: ids, errors, reason codes, records, reports."""
