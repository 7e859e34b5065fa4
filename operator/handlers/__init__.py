"""specinfer.operator.handlers"""
