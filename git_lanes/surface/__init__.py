"""How Git and shells host the extension: aliases, completion, the manual."""
