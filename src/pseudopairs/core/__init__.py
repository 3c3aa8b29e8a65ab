"""The ground every stage stands on: settings declared once (settings), extension points
(registry), the files between steps and their atomic writes (layout, io) and the typed jobs
the rules hand the steps (jobs). It imports no stage and no workflow module."""
