"""The tasks: pair.py (texts -> a label or a score), glue.py (the GLUE tasks' files),
generic.py (your own labels), race.py (four options per question)."""
