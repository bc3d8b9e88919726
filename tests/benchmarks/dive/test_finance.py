"""The finance world: seeded market, one known-output test per tool, typing and determinism."""

import datetime
import json
import math

import numpy as np
import pytest

from jaxpapers.benchmarks.dive.worlds import World, call_tool, domain_tools, make_world

DATES = ["2026-01-05", "2026-01-06", "2026-01-07", "2026-01-08", "2026-01-09"]
A, B, G = "600001.SH", "000002.SZ", "300003.SZ"


def _world() -> World:
    tickers = {
        B: {"company": "Beta Tech", "sector": "technology", "exchange": "SZ", "shares": 50.0,
            "dividend": 0.0, "closes": [20.0, 21.0, 22.0, 23.0, 24.0]},
        G: {"company": "Gamma Tech", "sector": "technology", "exchange": "SZ", "shares": 10.0,
            "dividend": 1.0, "closes": [50.0, 40.0, 45.0, 30.0, 35.0]},
        A: {"company": "Alpha Bank", "sector": "banking", "exchange": "SH", "shares": 100.0,
            "dividend": 0.5, "closes": [10.0, 12.0, 9.0, 15.0, 14.0]},
    }
    lexicon = {"company": ("Alpha Bank", "Beta Tech", "Gamma Tech"), "date": tuple(DATES),
               "exchange": ("SH", "SZ"), "sector": ("banking", "technology"),
               "ticker": (B, A, G)}
    return World("finance", 0, {"dates": DATES, "tickers": tickers}, lexicon)


W = _world()


def ok(name, **args):
    good, out = call_tool(W, f"finance.{name}", args)
    assert good, out
    return out


def err(name, **args):
    good, out = call_tool(W, f"finance.{name}", args)
    assert not good, out
    assert isinstance(out, str) and out
    return out


# ----------------------------------------------------------------------------- listing

def test_get_sector():
    assert ok("get_sector", ticker=A) == "banking"
    assert "ticker" in err("get_sector", ticker="999999.SH")


def test_find_sector():
    assert ok("find_sector", company="Beta Tech") == "technology"
    assert "company" in err("find_sector", company="Delta Corp")


def test_get_exchange():
    assert ok("get_exchange", ticker=G) == "SZ"


def test_find_exchange():
    assert ok("find_exchange", company="Alpha Bank") == "SH"


def test_get_company():
    assert ok("get_company", ticker=B) == "Beta Tech"


def test_find_company():
    # last-day caps: Beta 24 * 50 = 1200 > Gamma 35 * 10 = 350
    assert ok("find_company", sector="technology") == "Beta Tech"
    assert ok("find_company", sector="banking") == "Alpha Bank"
    assert "energy" in err("find_company", sector="energy")  # a sector with no stock here


def test_find_ticker():
    assert ok("find_ticker", company="Gamma Tech") == G


def test_list_ticker():
    assert ok("list_ticker", sector="technology") == [B, G]
    assert ok("list_ticker", sector="energy") == []
    assert "sector" in err("list_ticker", sector="crypto")


def test_count_ticker():
    assert ok("count_ticker", exchange="SZ") == 2
    assert ok("count_ticker", exchange="SH") == 1
    assert ok("count_ticker", exchange="BJ") == 0
    assert "exchange" in err("count_ticker", exchange="NYSE")


# ----------------------------------------------------------------------------- quotes

def test_get_close():
    assert ok("get_close", ticker=A, date="2026-01-07") == 9.0
    assert "trading day" in err("get_close", ticker=A, date="2026-01-10")  # a Saturday
    assert "ISO" in err("get_close", ticker=A, date="2026/01/07")


def test_list_close():
    assert ok("list_close", ticker=A, start="2026-01-06", end="2026-01-08") == [12.0, 9.0, 15.0]
    assert ok("list_close", ticker=A, start="2026-01-01", end="2026-01-06") == [10.0, 12.0]
    assert "no trading day" in err("list_close", ticker=A, start="2026-01-10", end="2026-01-11")
    assert "after" in err("list_close", ticker=A, start="2026-01-08", end="2026-01-06")


def test_list_date():
    assert ok("list_date", start="2026-01-03", end="2026-01-06") == DATES[:2]
    assert ok("list_date", start="2026-02-01", end="2026-02-03") == []


def test_count_date():
    assert ok("count_date", start="2026-01-06", end="2026-01-31") == 4


def test_get_change():
    assert ok("get_change", ticker=A, date="2026-01-06") == 20.0
    assert ok("get_change", ticker=A, date="2026-01-07") == -25.0
    assert "previous" in err("get_change", ticker=A, date="2026-01-05")


def test_compute_change():
    assert ok("compute_change", old=10, new=12) == 20.0
    assert ok("compute_change", old=-4.0, new=-2.0) == 50.0
    assert "old" in err("compute_change", old=0, new=3.0)


# ----------------------------------------------------------------------------- statistics

def test_find_peak():
    assert ok("find_peak", ticker=A) == "2026-01-08"
    assert ok("find_peak", ticker=G) == "2026-01-05"


def test_get_peak():
    assert ok("get_peak", ticker=A) == 15.0


def test_find_trough():
    assert ok("find_trough", ticker=A) == "2026-01-07"
    assert ok("find_trough", ticker=G) == "2026-01-08"


def test_get_trough():
    assert ok("get_trough", ticker=G) == 30.0


def test_get_mean():
    assert ok("get_mean", ticker=A) == 12.0


def test_compute_mean():
    assert ok("compute_mean", series=[1, 2, 3, 4]) == 2.5
    assert "at least 1" in err("compute_mean", series=[])
    assert "numbers" in err("compute_mean", series=[1.0, "2"])


def test_compute_volatility():
    x = [10.0, 12.0, 9.0, 15.0, 14.0]
    want = float(np.std(np.diff(np.log(np.array(x, np.float64))), ddof=1))
    assert ok("compute_volatility", series=x) == pytest.approx(want, abs=1e-6)
    assert ok("compute_volatility", series=[100, 110, 99]) == pytest.approx(
        abs(math.log(1.1) - math.log(0.9)) / math.sqrt(2), abs=1e-6)
    assert "at least 3" in err("compute_volatility", series=[1.0, 2.0])
    assert "positive" in err("compute_volatility", series=[1.0, 0.0, 2.0])


def test_compare_volatility():
    vol = {k: np.std(np.diff(np.log(W.data["tickers"][k]["closes"])), ddof=1) for k in (A, B)}
    assert vol[A] > vol[B]
    assert ok("compare_volatility", first=A, second=B) == A
    assert ok("compare_volatility", first=B, second=A) == A
    assert "ticker" in err("compare_volatility", first=A, second="X")


def test_compute_drawdown():
    assert ok("compute_drawdown", series=[10.0, 12.0, 9.0, 15.0, 14.0]) == 0.25
    assert ok("compute_drawdown", series=[1.0, 2.0, 3.0]) == 0.0
    assert "at least 2" in err("compute_drawdown", series=[5.0])


def test_compare_drawdown():
    # Alpha 1 - 9/12 = 0.25, Gamma 1 - 30/50 = 0.4
    assert ok("compare_drawdown", first=A, second=G) == G
    assert ok("compare_drawdown", first=G, second=A) == G


def test_compute_return():
    assert ok("compute_return", series=[10.0, 12.0, 9.0, 15.0, 14.0]) == 0.4
    assert ok("compute_return", series=[50, 35]) == -0.3


def test_compare_return():
    # Alpha +40%, Beta +20%, Gamma -30%
    assert ok("compare_return", first=G, second=B) == B
    assert ok("compare_return", first=A, second=B) == A
    assert ok("compare_return", first=B, second=B) == B


# ----------------------------------------------------------------------------- valuation

def test_get_dividend():
    assert ok("get_dividend", ticker=A) == 0.5
    assert ok("get_dividend", ticker=B) == 0.0


def test_list_dividend():
    assert ok("list_dividend", sector="technology") == [G]


def test_count_dividend():
    assert ok("count_dividend", sector="technology") == 1
    assert ok("count_dividend", sector="banking") == 1


def test_get_yield():
    assert ok("get_yield", ticker=G) == round(1.0 / 35.0 * 100.0, 6)


def test_compute_yield():
    assert ok("compute_yield", dividend=0.5, price=10) == 5.0
    assert "price" in err("compute_yield", dividend=0.5, price=0)
    assert "dividend" in err("compute_yield", dividend=-1.0, price=3.0)


def test_get_cap():
    assert ok("get_cap", ticker=A, date="2026-01-07") == 900.0


def test_compare_cap():
    assert ok("compare_cap", first=B, second=A) == A  # 1400 > 1200
    assert ok("compare_cap", first=B, second=G) == B


# ----------------------------------------------------------------------------- framework

def test_bad_calls():
    assert "JSON type" in err("get_close", ticker=A, date=20260107)
    assert "JSON type" in err("compute_mean", series="1,2")
    assert "missing" in err("get_close", ticker=A)
    assert "unknown arguments" in err("get_sector", ticker=A, sector="banking")
    good, msg = call_tool(W, "general.get_country", {"city": "Paris"})
    assert not good and "general" in msg


def test_every_tool_has_a_known_output_test():
    names = {n.split(".", 1)[1] for n in domain_tools("finance")}
    assert len(names) >= 21
    tested = {n[len("test_"):] for n in globals() if n.startswith("test_")}
    assert names <= tested, sorted(names - tested)


def test_world_contents():
    w = make_world("finance", 0)
    dates, tickers = w.data["dates"], w.data["tickers"]
    assert len(dates) == 120 and dates[0] == "2026-01-05"
    assert all(datetime.date.fromisoformat(d).weekday() < 5 for d in dates)
    assert dates == sorted(set(dates))
    assert len(tickers) == 25 and list(w.lexicon["ticker"]) == sorted(tickers)
    assert len(set(w.lexicon["company"])) == 25
    for sector in w.lexicon["sector"]:
        assert sum(t["sector"] == sector for t in tickers.values()) >= 2
    assert len(w.lexicon["sector"]) == 6
    for t in tickers.values():
        assert len(t["closes"]) == 120 and min(t["closes"]) > 0
    assert 0 < sum(t["dividend"] > 0 for t in tickers.values()) < 25
    json.dumps(w.data)


def test_tools_run_on_a_built_world():
    w = make_world("finance", 5)
    first, last = w.data["dates"][0], w.data["dates"][-1]
    for ticker in w.lexicon["ticker"][:5]:
        good, series = call_tool(w, "finance.list_close", {"ticker": ticker, "start": first,
                                                           "end": last})
        assert good and len(series) == 120
        for stat in ("mean", "volatility", "drawdown", "return"):
            good, out = call_tool(w, f"finance.compute_{stat}", {"series": series})
            assert good and math.isfinite(out)
        good, peak = call_tool(w, "finance.find_peak", {"ticker": ticker})
        assert good and call_tool(w, "finance.get_close", {"ticker": ticker, "date": peak})[1] \
            == max(series)
