"""dba3c.launchers.preflight.wire: a report through its fixed-size buffer."""

import dataclasses

from dba3c.launchers.preflight.wire import decode_report, encode_report
from tests.support.preflight import row


def test_a_report_survives_its_buffer():
    assert decode_report(encode_report(row(2))) == row(2)
    assert dataclasses.asdict(decode_report(encode_report(row(0, rom_error="x"))))[
        "rom_error"] == "x"
    trains_in = dataclasses.replace(row(1), precision="bfloat16", native_bfloat16=True)
    assert decode_report(encode_report(trains_in)) == trains_in
