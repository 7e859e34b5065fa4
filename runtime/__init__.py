"""specinfer.runtime"""
