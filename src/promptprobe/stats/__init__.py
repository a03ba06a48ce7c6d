"""Statistics: pure functions over counts (intervals, tests, sequential evidence, planning).

Nothing here imports the engine or the views; scipy and numpy are imported only inside the
functions that need them, so that a report is quick to print.
"""
