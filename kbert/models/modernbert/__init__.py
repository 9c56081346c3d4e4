"""ModernBERT (`model="modernbert"`): pre-norm blocks, half-split RoPE, GeGLU, local and global attention."""
