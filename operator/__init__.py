"""specinfer.operator"""
