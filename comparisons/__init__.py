"""Side-by-side checks of dlbench's adapters against the same networks written the way
each framework's own users write them (torchvision, Keras, Flax, a plain IOBinding loop)."""
