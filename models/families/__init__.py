"""The zoo's model families, one module per paper's networks; `models/zoo.py` names them."""
