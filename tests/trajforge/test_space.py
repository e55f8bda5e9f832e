"""The sizes an export writes a screenshot at and computes its coordinates for, per trainer."""

from __future__ import annotations

from trajforge.actions.space import coordinate_screen, export_sizes, trainer_input


def test_each_trainer_gets_the_stored_screenshot_and_coordinates_for_its_own_resize() -> None:
    # LLaMA-Factory 0.9.5 shrinks to 768*768 pixels with int() sides, then its processor smart-resizes
    assert trainer_input("llamafactory", 1080, 2400) == (515, 1144)
    assert export_sizes("qwen", 1080, 2400, "llamafactory") == ((1080, 2400), (515, 1144))
    assert coordinate_screen("qwen", 515, 1144) == coordinate_screen("uitars15", 515, 1144)
    assert (coordinate_screen("qwen", 515, 1144).width, coordinate_screen("qwen", 515, 1144).height) == (
        504,
        1148,
    )
    for trainer in ("swift", "verl"):  # qwen-vl-utils' fetch_image: the processor's own resize
        assert export_sizes("qwen", 1080, 2400, trainer) == ((1080, 2400), (1080, 2400))
    # an image within LLaMA-Factory's limit is handed over as it is
    assert export_sizes("qwen", 540, 1000, "llamafactory") == ((540, 1000), (540, 1000))


def test_pixels_of_the_image_itself_are_written_at_the_fed_size_and_relative_formats_as_stored() -> None:
    assert export_sizes("androidworld", 1080, 2400, "llamafactory") == ((504, 1120), (504, 1120))
    assert export_sizes("androidworld", 1080, 2400, "verl") == ((1092, 2408), (1092, 2408))
    assert export_sizes("canonical", 1080, 2400, "llamafactory") == ((1080, 2400), (1080, 2400))
    assert export_sizes("qwen", 1080, 2400, None) == ((1080, 2400), (1080, 2400))
