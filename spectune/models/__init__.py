"""Model loading, tokenizer compatibility and the bundled family."""
from spectune.models.loading import LoadedModel, check_compatible, load_model, load_models, load_tokenizer, model_path

__all__ = ["LoadedModel", "check_compatible", "load_model", "load_models", "load_tokenizer", "model_path"]
