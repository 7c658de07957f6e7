"""The Keras format's verbs (`base.Format`); its reader, writer and runner are imported when a verb is used."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rnnconv.core.canonical import CanonicalRNN, RNNSpec, stack
from rnnconv.core.contracts import InspectReport, Provenance
from rnnconv.errors import BadInput, RnnconvError
from rnnconv.formats.base import Format, Written
from rnnconv.formats.keras import PLUGIN
from rnnconv.formats.probe import HDF5_MAGIC, Probe
from rnnconv.formats.registry import register
from rnnconv.formats.setting_fields import READ_FIELDS, WRITE_FIELDS
from rnnconv.formats.settings import ReadOptions, WriteOptions
from rnnconv.formats.sources import Source, convert_each, inspect_entry
from rnnconv.formats.writing import literal
from rnnconv.safeio.digests import SourcePass
from rnnconv.safeio.inputs import resolved

if TYPE_CHECKING:
    from rnnconv.core.report_contracts import Report
    from rnnconv.formats.keras.config import KerasLayer


STATED = ("activation", "recurrent_activation")  # what a user states for a weights file without a model config
THINGS = "recurrent layers"  # what a refusal of every layer names
# The settings of one RNN's reading or writing, which a whole model's rescue (each variable and setting copied as
# stored) would otherwise leave unused: given, they are refused.
WHOLE_MODEL_TAKES_NONE = (
    "bias_split", "nonlinearity", "activation", "recurrent_activation", "dequantize", "forget_bias", "dtype",
    "profile", "streaming", "chunk",
)  # fmt: skip
RESCUE_TOLERANCE = 1e-5  # a rescued model against the numpy of its source: float32 rounding, nothing more


def _given(settings: ReadOptions | WriteOptions, name: str) -> bool:
    return bool(getattr(settings, name) != type(settings).model_fields[name].default)


def _name(layer: KerasLayer) -> str:
    return layer.name


@register
class KerasFormat(Format):
    plugin = PLUGIN

    def locate(self, path: Path) -> Path | None:
        from rnnconv.formats.keras.savedmodel import saved_model_in

        return saved_model_in(path)

    def source_parts(self, path: Path) -> list[Path]:
        from rnnconv.formats.keras.wire import is_object_file

        if not is_object_file(path):
            return []
        from rnnconv.formats.keras.savedmodel import source_parts

        return source_parts(path)

    def claims(self, probe: Probe) -> bool:
        from rnnconv.formats.tf1.wire import INDEX_SUFFIX

        if not probe.path.name.endswith(INDEX_SUFFIX):
            return True
        from rnnconv.formats.keras.savedmodel import is_object_checkpoint

        return is_object_checkpoint(probe.path)

    @contextlib.contextmanager
    def read(self, path: Path, options: ReadOptions) -> Iterator[Source]:
        from rnnconv.formats.keras.reader import opened, to_canonical

        # begun once the file is open: see KerasFile
        reading = SourcePass(path, self.source_parts(path)) if options.hash_source else None
        with opened(path, reading) as keras_file:
            versions = keras_file.versions
            info = Provenance(
                path=str(resolved(path)),
                format=keras_file.kind,
                keras_version=versions.get("keras_version"),
                backend=versions.get("backend"),
            )
            digest = None if reading is None else reading.start().digest

            stated = {key: getattr(options, key) for key in STATED}

            def canonical(layer: KerasLayer) -> CanonicalRNN:
                recorded = keras_file.activations.get(layer.name) if layer.inferred else None  # no config to say it
                told = {**stated, "activation": stated["activation"] or recorded}
                notes = []
                if layer.name in keras_file.shown:  # a SavedModel's serving graph showed its activations
                    from rnnconv.formats.keras.savedmodel import shown_notes

                    notes = shown_notes(layer, keras_file.shown[layer.name], stated)
                rnn = to_canonical(layer, info, options.bias_split, keras_file.reader, told)
                rnn.notes.extend(notes)
                rnn.digest = digest
                rnn.origin = keras_file.records.get(layer.name)
                return rnn

            def describe(layer: KerasLayer) -> str:
                return f"layer {layer.name!r} ({layer.display_class}) in {self.info.kinds[keras_file.kind]} {path}"

            def stacked(names: list[str]) -> CanonicalRNN:  # consecutive layers -> one multi-layer RNN
                layers = [keras_file.layer(n) for n in names]
                parts = convert_each(layers, canonical, _name, describe=describe, strict=True, things=THINGS)
                rnn = stack(",".join(names), parts.rnns)
                rnn.origin = keras_file.records.get(rnn.name)
                return rnn

            if options.layer and "," in options.layer:
                yield Source([stacked([n.strip() for n in options.layer.split(",")])])
                return
            groups = [where.split(",") for where in keras_file.records]  # the RNNs rnnconv wrote, by their layers
            if options.layer is None and groups and (len(groups) == 1 or options.take_all):
                yield Source([stacked(n) if len(n) > 1 else canonical(keras_file.layer(*n)) for n in groups])
                return
            several = options.take_all and options.layer is None and len(keras_file.layers) > 1
            chosen = keras_file.layers if several else [keras_file.layer(options.layer)]
            yield convert_each(chosen, canonical, _name, describe=describe, things=THINGS)

    def write(self, rnns: list[CanonicalRNN], path: Path, options: WriteOptions) -> Written:
        from rnnconv.formats.keras.writer import loading_snippet, write_keras

        write_keras(rnns, path, options.dtype, options.force)
        return Written([path], usage=loading_snippet(rnns, path))

    def write_model(self, source: Path, path: Path, options: ReadOptions, write: WriteOptions) -> Written | None:
        """A .keras archive of a Keras before 3.3.3 (none rnnconv wrote) converted to Keras without --layer: its whole
        model, as Keras 3.15 loads it (`rescue`), every layer's variables kept as stored."""
        from rnnconv.formats.keras.rescue import holds_model, write_rescued

        if options.layer is not None or not holds_model(source, rescued=True):
            return None
        for given, fields in ((options, READ_FIELDS), (write, WRITE_FIELDS)):
            setting = next((name for name in WHOLE_MODEL_TAKES_NONE if name in fields and _given(given, name)), None)
            if setting is not None:
                flag = (fields[setting].flags or (f"--{setting}",))[0]
                raise BadInput(
                    f"{source} holds a whole model, copied with each variable and setting as it is stored: leave out "
                    f"{flag}, or name one RNN with --layer"
                )
        rescued = write_rescued(source, path, write.force)
        usage = (
            f"import keras\nmodel = keras.models.load_model({literal(path)})"
            if path.suffix == ".keras"
            else f"model.load_weights({literal(path)})  # model: the source's model, built in Keras 3"
        )
        warnings = [f"not carried over: {what}" for what in rescued.dropped]
        warnings += [f"{name} holds {bad} NaN or Inf value(s)" for name, bad in rescued.non_finite.items()]
        return Written([path], warnings, usage)

    def copies_model(self, path: Path, against: Path) -> bool:
        from rnnconv.formats.keras.rescue import holds_model

        if not (path.is_file() and against.is_file()):
            return False
        try:  # any other file against it is the audit's to judge, in its words
            return holds_model(path) and holds_model(against, rescued=True)
        except RnnconvError:
            return False

    def model_report(self, path: Path, against: Path, batch: int, steps: int, seed: int, atol: float | None) -> Report:
        from rnnconv.formats.keras.model import check_rescued

        return check_rescued(path, against, batch, steps, seed, RESCUE_TOLERANCE if atol is None else atol)

    def into_suffixes(self, model: Path) -> tuple[str, ...]:
        with open(model, "rb") as f:  # a copy is the same container: a .keras zip, or an HDF5 file
            return (model.suffix, ".h5", ".hdf5") if f.read(len(HDF5_MAGIC)) == HDF5_MAGIC else (model.suffix, ".keras")

    def write_into(
        self, rnns: list[CanonicalRNN], model: Path, path: Path, layer: str | None, options: WriteOptions
    ) -> Written:
        from rnnconv.formats.keras.writer import patch_keras_file

        patch_keras_file(rnns, self.places(rnns, layer), model, path, options.force)
        return Written([path])

    def inspect(self, path: Path) -> InspectReport:
        from rnnconv.formats.keras.reader import layer_sizes, opened, to_canonical

        provenance = Provenance(path=str(path))
        with opened(path) as keras_file:
            entries = [
                inspect_entry(
                    layer.name,
                    layer.display_class,
                    functools.partial(to_canonical, layer, provenance),
                    functools.partial(layer_sizes, layer),
                )
                for layer in keras_file.layers
            ]
            return InspectReport(path=str(path), format=keras_file.kind, versions=keras_file.versions, rnns=entries)

    def resolve(self, path: Path, recorded: Provenance, layer: str | None) -> Provenance:
        if recorded.layer or recorded.stacked:
            return recorded
        from rnnconv.formats.keras.reader import opened

        with opened(path) as keras_file:
            return recorded.model_copy(update={"layer": keras_file.layer(layer).name, "format": keras_file.kind})

    def source_options(self, source: Provenance) -> ReadOptions:
        """Read with the activations the conversion was told (a bare weights file does not store them)."""
        stated = {k: v for k, v in (source.keras_config or {}).items() if k in STATED and isinstance(v, str)}
        return super().source_options(source).model_copy(update=stated)

    def run(
        self, path: Path, source: Provenance, spec: RNNSpec, inputs: dict[str, np.ndarray | None]
    ) -> tuple[dict[str, np.ndarray | None], str]:
        from rnnconv.formats.keras.runner import run_source

        return run_source(path, source.stacked or [source.layer or ""], spec, inputs, source.keras_config or {})
