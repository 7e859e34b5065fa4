"""specinfer.bench"""
