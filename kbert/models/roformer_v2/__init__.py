"""RoFormer-v2 (`model="roformer_v2"`): RoFormer without biases, with a parameter-free norm."""
