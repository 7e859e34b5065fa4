"""The SpeculativeInference controller's pure logic: its status and conditions, the engine pods' failures."""
