"""specinfer.runtime.methods"""
