"""T5 (`model="t5"`, `"t5.1.0"`), T5.1.1 (`"t5.1.1"`) and mT5 (`"mt5.1.1"`), and their `_encoder` / `_decoder` parts."""
