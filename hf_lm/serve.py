"""`hflm-serve`: transformers' own OpenAI-compatible server (`transformers serve`), with hf_lm's classes.

`transformers serve` loads a folder's model with `getattr(transformers, config.architectures[0])`, so a
class that is not an attribute of the `transformers` module cannot be served
(`module transformers has no attribute HfLmGPTForCausalLM`). This entry point attaches every hf_lm
model class to the module, then runs transformers' `Serve` command unchanged: the same arguments,
endpoints (`/v1/chat/completions`, `/v1/completions`, ...) and `--continuous-batching`.

    hflm-serve path/to/folder --host 127.0.0.1 --port 8000 [--continuous-batching]
    hflm-serve --help                        # transformers serve's own options

Remote code stays opt-in, as in transformers: `--trust-remote-code` is off by default and is passed
through untouched. hf_lm's classes are the installed package's (local code, as transformers' own
models are): `import hf_lm` registers its configs with `AutoConfig`, so a folder's config loads
with the installed class and the modeling files saved next to its weights are never imported. A
folder of another library that needs remote code is refused as `transformers serve` refuses it.

Not shipped with checkpoints (shipped model code imports only torch and transformers).
"""

from __future__ import annotations

import logging

import transformers

from .families import FAMILIES

logger = logging.getLogger(__name__)


def expose_hf_lm_classes() -> list[str]:
    """Make every hf_lm model class an attribute of the `transformers` module, where transformers'
    server looks a folder's architecture up; the names attached. A name transformers already defines
    is left as it is (hf_lm's names all start with `HfLm`, so none does today)."""
    attached = []
    for family in FAMILIES.values():
        for model_class in family.heads.values():
            name = model_class.__name__
            existing = getattr(transformers, name, None)
            if existing is None:
                setattr(transformers, name, model_class)
                attached.append(name)
            elif existing is not model_class:
                logger.warning("transformers already defines %s: the server uses transformers' own", name)
    return attached


def main(argv: list[str] | None = None) -> None:
    """Run `transformers serve` with `argv` (default: the command line) and hf_lm's classes resolvable."""
    import typer
    from transformers.cli.serve import Serve

    expose_hf_lm_classes()
    app = typer.Typer(add_completion=False)
    # one command, so `hflm-serve MODEL --port N` reads as `transformers serve MODEL --port N`
    app.command(name="serve")(Serve)
    app(args=argv, prog_name="hflm-serve")


if __name__ == "__main__":
    main()
