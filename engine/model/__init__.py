"""The model side: the native model (`native`), the real-checkpoint adapters, the loader,
checkpoint I/O and model paths. Imports nothing here: `model_path` is torch-free."""
