"""specinfer.operator.tuner"""
