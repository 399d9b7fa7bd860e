"""The initiative as Git holds it: intent files, the plan and its digest."""
