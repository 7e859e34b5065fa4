"""Method auto: compare the candidates on the resource's engine and name the one that serves.

policy.py decides (pure); controller.py creates the comparisons and writes status.selection.
"""
