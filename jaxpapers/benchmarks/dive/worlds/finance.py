"""Finance world: a small stock market with seeded daily closing prices.

The official DIVE financial domain calls Tushare Pro (``stock_basic``, ``daily``, ``daily_basic``,
``dividend``, ...) and computes statistics over the returned quotes. Offline, a world holds:

* 25 listed tickers (Tushare-style codes such as ``"600519.SH"``), each with a company name, one
  of six sectors, an exchange (``SH`` / ``SZ`` / ``BJ``), shares outstanding (millions) and a cash
  dividend per share (``0.0`` for the tickers that pay none);
* a calendar of 120 trading days (weekdays from 2026-01-05, ISO date strings) and, per ticker, a
  closing price for every trading day: a geometric random walk with a per-ticker drift and
  volatility, rounded to cents.

Everything lives in ``data`` as plain lists and dicts; the tools read it directly. The tools
mirror what the Tushare tools are used for in DIVE's tasks: reference lookups (``stock_basic``:
sector, exchange, company name), quotes (``daily``: a close on a date, the closes over a range,
the daily percentage change, the trading calendar), derived statistics (mean, volatility of log
returns, maximum drawdown, total return, extremes) and valuation (``daily_basic`` / ``dividend``:
market capitalisation, dividend, dividend yield). Series statistics and percentage / yield
arithmetic are ``"P"`` tools so chains like ticker -> series -> volatility form naturally.
"""

from __future__ import annotations

import datetime
import math
import random

from jaxpapers.benchmarks.dive.worlds._core import ToolError, World, arg, register_world, tool

D = "finance"
SECTORS = ("banking", "consumer", "energy", "healthcare", "industrials", "technology")
EXCHANGES = ("BJ", "SH", "SZ")
N_TICKERS = 25
N_DAYS = 120
FIRST_DAY = datetime.date(2026, 1, 5)
_SUFFIX = {"banking": "Bank", "consumer": "Foods", "energy": "Energy", "healthcare": "Pharma",
           "industrials": "Machinery", "technology": "Tech"}
_PREFIXES = ("Bao", "Guo", "Heng", "Hong", "Hua", "Jin", "Kai", "Long", "Rui", "Tian", "Xin",
             "Zhong")
_STEMS = ("an", "cheng", "da", "feng", "kang", "sheng", "tai", "xing", "yuan", "ze")
_BOARDS = {"SH": ("600", "601", "603", "688"), "SZ": ("000", "002", "300"), "BJ": ("830", "870")}


def _trading_days(n: int) -> list[str]:
    days, d = [], FIRST_DAY
    while len(days) < n:
        if d.weekday() < 5:
            days.append(d.isoformat())
        d += datetime.timedelta(days=1)
    return days


@register_world(D)
def build(rng: random.Random) -> tuple[dict, dict]:
    dates = _trading_days(N_DAYS)
    sectors = [s for s in SECTORS for _ in range(2)]
    sectors += [rng.choice(SECTORS) for _ in range(N_TICKERS - len(sectors))]
    rng.shuffle(sectors)
    stems = rng.sample([(p, s) for p in _PREFIXES for s in _STEMS], N_TICKERS)
    tickers: dict[str, dict] = {}
    names: set[str] = set()
    for sector, (prefix, stem) in zip(sectors, stems):
        exchange = rng.choices(EXCHANGES, weights=(1, 5, 4))[0]
        code = ""
        while not code or code in tickers:
            code = f"{rng.choice(_BOARDS[exchange])}{rng.randrange(1000):03d}.{exchange}"
        company = f"{prefix}{stem} {_SUFFIX[sector]}"
        if company in names:  # cannot happen with distinct (prefix, stem); kept as a guard
            raise AssertionError(company)
        names.add(company)
        price = rng.uniform(5.0, 120.0)
        drift, vol = rng.uniform(-0.0015, 0.002), rng.uniform(0.008, 0.035)
        closes = [round(price, 2)]
        for _ in range(N_DAYS - 1):
            price *= math.exp(rng.gauss(drift, vol))
            closes.append(max(0.01, round(price, 2)))
        pays = rng.random() < 0.45
        dividend = round(closes[0] * rng.uniform(0.01, 0.05), 2) if pays else 0.0
        tickers[code] = {"company": company, "sector": sector, "exchange": exchange,
                         "shares": round(rng.uniform(50.0, 5000.0), 1), "dividend": dividend,
                         "closes": closes}
    data = {"dates": dates, "tickers": {k: tickers[k] for k in sorted(tickers)}}
    lexicon = {"ticker": sorted(tickers),
               "company": sorted(t["company"] for t in tickers.values()),
               "sector": sorted({t["sector"] for t in tickers.values()}),
               "exchange": sorted({t["exchange"] for t in tickers.values()}),
               "date": list(dates)}
    return data, lexicon


# ----------------------------------------------------------------------------- helpers

def _ticker(world: World, ticker: str) -> dict:
    t = world.data["tickers"].get(ticker)
    if t is None:
        raise ToolError(f"ticker {ticker!r} is not listed (codes look like '600519.SH')")
    return t


def _company(world: World, company: str) -> tuple[str, dict]:
    for code, t in world.data["tickers"].items():
        if t["company"] == company:
            return code, t
    raise ToolError(f"company {company!r} is not listed")


def _sector(world: World, sector: str) -> list[str]:
    if sector not in SECTORS:
        raise ToolError(f"sector {sector!r} is unknown; sectors: {list(SECTORS)}")
    return sorted(k for k, t in world.data["tickers"].items() if t["sector"] == sector)


def _day(world: World, date: str, name: str = "date") -> int:
    dates = world.data["dates"]
    if date not in dates:
        _iso(date, name)
        raise ToolError(f"{name} {date!r} is not a trading day")
    return dates.index(date)


def _iso(date: str, name: str) -> datetime.date:
    try:
        if len(date) != 10:
            raise ValueError
        return datetime.date.fromisoformat(date)
    except ValueError:
        raise ToolError(f"{name} {date!r} is not an ISO date YYYY-MM-DD") from None


def _range(world: World, start: str, end: str) -> list[int]:
    a, b = _iso(start, "start"), _iso(end, "end")
    if a > b:
        raise ToolError(f"start {start} is after end {end}")
    return [i for i, d in enumerate(world.data["dates"]) if start <= d <= end]


def _series(series: list, name: str = "series", *, min_len: int = 1,
            positive: bool = False) -> list[float]:
    for v in series:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ToolError(f"{name} must hold finite numbers, got {v!r}")
        if positive and v <= 0:
            raise ToolError(f"{name} must hold positive prices, got {v!r}")
    if len(series) < min_len:
        raise ToolError(f"{name} needs at least {min_len} values, got {len(series)}")
    return [float(v) for v in series]


def _log_returns(prices: list[float]) -> list[float]:
    return [math.log(b / a) for a, b in zip(prices, prices[1:])]


def _volatility(prices: list[float]) -> float:
    r = _log_returns(prices)
    m = sum(r) / len(r)
    return math.sqrt(sum((x - m) ** 2 for x in r) / (len(r) - 1))


def _drawdown(prices: list[float]) -> float:
    peak, worst = prices[0], 0.0
    for p in prices:
        peak = max(peak, p)
        worst = max(worst, 1.0 - p / peak)
    return worst


def _return(prices: list[float]) -> float:
    return prices[-1] / prices[0] - 1.0


def _cap(t: dict, i: int) -> float:
    return t["closes"][i] * t["shares"]


def _better(world: World, first: str, second: str, key) -> str:
    """The ticker whose ``key(record)`` is larger (ties go to ``first``)."""
    a, b = _ticker(world, first), _ticker(world, second)
    return second if key(b) > key(a) else first


T = arg("ticker", "string", "Tushare stock code, e.g. '600519.SH'")
T1 = arg("ticker", "string", "first stock code")
T2 = arg("ticker", "string", "second stock code")
DATE = arg("date", "string", "trading day, ISO YYYY-MM-DD")
START = arg("date", "string", "first day of the range (inclusive), ISO YYYY-MM-DD")
END = arg("date", "string", "last day of the range (inclusive), ISO YYYY-MM-DD")
SERIES = arg("series", "array", "closing prices in date order", items="number")
COMPANY = arg("company", "string", "company name")
SECTOR = arg("sector", "string", "industry sector")
EXCHANGE = arg("exchange", "string", "exchange code: SH, SZ or BJ")

# ----------------------------------------------------------------------------- listing


@tool(D, "get", "sector", "Industry sector of a listed stock.", params={"ticker": T},
      returns=arg("sector", "string"), kind="R", group="listing")
def get_sector(world, ticker):
    return _ticker(world, ticker)["sector"]


@tool(D, "find", "sector", "Industry sector of a company, looked up by its name.",
      params={"company": COMPANY}, returns=arg("sector", "string"), kind="R", group="listing")
def find_sector(world, company):
    return _company(world, company)[1]["sector"]


@tool(D, "get", "exchange", "Exchange (SH, SZ or BJ) a stock is listed on.", params={"ticker": T},
      returns=arg("exchange", "string"), kind="R", group="listing")
def get_exchange(world, ticker):
    return _ticker(world, ticker)["exchange"]


@tool(D, "find", "exchange", "Exchange a company is listed on, looked up by its name.",
      params={"company": COMPANY}, returns=arg("exchange", "string"), kind="R", group="listing")
def find_exchange(world, company):
    return _company(world, company)[1]["exchange"]


@tool(D, "get", "company", "Company name of a listed stock.", params={"ticker": T},
      returns=arg("company", "string"), kind="R", group="listing")
def get_company(world, ticker):
    return _ticker(world, ticker)["company"]


@tool(D, "find", "company",
      "The company with the largest market capitalisation in a sector on the last trading day.",
      params={"sector": SECTOR}, returns=arg("company", "string"), kind="R", group="listing")
def find_company(world, sector):
    codes = _sector(world, sector)
    if not codes:
        raise ToolError(f"sector {sector!r} has no listed stock in this market")
    ts = world.data["tickers"]
    best = max(codes, key=lambda k: (_cap(ts[k], -1), k))
    return ts[best]["company"]


@tool(D, "find", "ticker", "Stock code of a company, looked up by its name.",
      params={"company": COMPANY}, returns=arg("ticker", "string"), kind="R", group="listing")
def find_ticker(world, company):
    return _company(world, company)[0]


@tool(D, "list", "ticker", "Stock codes listed in a sector (sorted).", params={"sector": SECTOR},
      returns=arg("ticker", "array", items="string"), kind="R", group="listing")
def list_ticker(world, sector):
    return _sector(world, sector)


@tool(D, "count", "ticker", "Number of stocks listed on an exchange.",
      params={"exchange": EXCHANGE}, returns=arg("integer", "integer"), kind="R", group="listing")
def count_ticker(world, exchange):
    if exchange not in EXCHANGES:
        raise ToolError(f"exchange {exchange!r} is unknown; exchanges: {list(EXCHANGES)}")
    return sum(t["exchange"] == exchange for t in world.data["tickers"].values())


# ----------------------------------------------------------------------------- quotes


@tool(D, "get", "close", "Closing price of a stock on a trading day.",
      params={"ticker": T, "date": DATE}, returns=arg("number", "number"), kind="R",
      group="quotes")
def get_close(world, ticker, date):
    return _ticker(world, ticker)["closes"][_day(world, date)]


@tool(D, "list", "close",
      "Closing prices of a stock on every trading day from start to end (inclusive), in order.",
      params={"ticker": T, "start": START, "end": END},
      returns=arg("series", "array", items="number"), kind="R", group="quotes")
def list_close(world, ticker, start, end):
    closes = _ticker(world, ticker)["closes"]
    idx = _range(world, start, end)
    if not idx:
        raise ToolError(f"no trading day between {start} and {end}")
    return [closes[i] for i in idx]


@tool(D, "list", "date", "Trading days from start to end (inclusive), in order.",
      params={"start": START, "end": END}, returns=arg("date", "array", items="string"),
      kind="R", group="quotes")
def list_date(world, start, end):
    return [world.data["dates"][i] for i in _range(world, start, end)]


@tool(D, "count", "date", "Number of trading days from start to end (inclusive).",
      params={"start": START, "end": END}, returns=arg("integer", "integer"), kind="R",
      group="quotes")
def count_date(world, start, end):
    return len(_range(world, start, end))


@tool(D, "get", "change",
      "Percentage change of a stock's close on a trading day from the previous trading day's "
      "close (Tushare pct_chg).", params={"ticker": T, "date": DATE},
      returns=arg("number", "number"), kind="R", group="quotes")
def get_change(world, ticker, date):
    closes, i = _ticker(world, ticker)["closes"], _day(world, date)
    if i == 0:
        raise ToolError(f"date {date} is the first trading day: no previous close")
    return (closes[i] / closes[i - 1] - 1.0) * 100.0


@tool(D, "compute", "change",
      "Percentage change from an old value to a new value: (new - old) / |old| * 100.",
      params={"old": arg("number", "number", "old value (non-zero)"),
              "new": arg("number", "number", "new value")},
      returns=arg("number", "number"), kind="P", group="quotes")
def compute_change(world, old, new):
    if old == 0:
        raise ToolError("old must be non-zero")
    return (new - old) / abs(old) * 100.0


# ----------------------------------------------------------------------------- statistics


@tool(D, "find", "peak", "Trading day of a stock's highest close (the earliest if tied).",
      params={"ticker": T}, returns=arg("date", "string"), kind="R", group="statistics")
def find_peak(world, ticker):
    closes = _ticker(world, ticker)["closes"]
    return world.data["dates"][closes.index(max(closes))]


@tool(D, "get", "peak", "Highest close of a stock over all trading days.", params={"ticker": T},
      returns=arg("number", "number"), kind="R", group="statistics")
def get_peak(world, ticker):
    return max(_ticker(world, ticker)["closes"])


@tool(D, "find", "trough", "Trading day of a stock's lowest close (the earliest if tied).",
      params={"ticker": T}, returns=arg("date", "string"), kind="R", group="statistics")
def find_trough(world, ticker):
    closes = _ticker(world, ticker)["closes"]
    return world.data["dates"][closes.index(min(closes))]


@tool(D, "get", "trough", "Lowest close of a stock over all trading days.", params={"ticker": T},
      returns=arg("number", "number"), kind="R", group="statistics")
def get_trough(world, ticker):
    return min(_ticker(world, ticker)["closes"])


@tool(D, "get", "mean", "Average close of a stock over all trading days.", params={"ticker": T},
      returns=arg("number", "number"), kind="R", group="statistics")
def get_mean(world, ticker):
    closes = _ticker(world, ticker)["closes"]
    return sum(closes) / len(closes)


@tool(D, "compute", "mean", "Arithmetic mean of a price series.", params={"series": SERIES},
      returns=arg("number", "number"), kind="P", group="statistics")
def compute_mean(world, series):
    xs = _series(series)
    return sum(xs) / len(xs)


@tool(D, "compute", "volatility",
      "Volatility of a price series: sample standard deviation of its daily log returns "
      "(needs at least 3 positive prices).", params={"series": SERIES},
      returns=arg("number", "number"), kind="P", group="statistics")
def compute_volatility(world, series):
    return _volatility(_series(series, min_len=3, positive=True))


@tool(D, "compare", "volatility",
      "Of two stocks, the one with the higher volatility over all trading days.",
      params={"first": T1, "second": T2}, returns=arg("ticker", "string"), kind="R",
      group="statistics")
def compare_volatility(world, first, second):
    return _better(world, first, second, lambda t: _volatility(t["closes"]))


@tool(D, "compute", "drawdown",
      "Maximum drawdown of a price series: the largest fall from a running peak, as a fraction "
      "of that peak (0 if it never falls).", params={"series": SERIES},
      returns=arg("number", "number"), kind="P", group="statistics")
def compute_drawdown(world, series):
    return _drawdown(_series(series, min_len=2, positive=True))


@tool(D, "compare", "drawdown",
      "Of two stocks, the one with the deeper maximum drawdown over all trading days.",
      params={"first": T1, "second": T2}, returns=arg("ticker", "string"), kind="R",
      group="statistics")
def compare_drawdown(world, first, second):
    return _better(world, first, second, lambda t: _drawdown(t["closes"]))


@tool(D, "compute", "return",
      "Total return of a price series: last / first - 1, as a fraction.",
      params={"series": SERIES}, returns=arg("number", "number"), kind="P", group="statistics")
def compute_return(world, series):
    return _return(_series(series, min_len=2, positive=True))


@tool(D, "compare", "return",
      "Of two stocks, the one with the higher total return over all trading days.",
      params={"first": T1, "second": T2}, returns=arg("ticker", "string"), kind="R",
      group="statistics")
def compare_return(world, first, second):
    return _better(world, first, second, lambda t: _return(t["closes"]))


# ----------------------------------------------------------------------------- valuation


@tool(D, "get", "dividend", "Cash dividend per share a stock pays this year (0 if none).",
      params={"ticker": T}, returns=arg("number", "number"), kind="R", group="valuation")
def get_dividend(world, ticker):
    return _ticker(world, ticker)["dividend"]


@tool(D, "list", "dividend", "Stock codes in a sector that pay a cash dividend (sorted).",
      params={"sector": SECTOR}, returns=arg("ticker", "array", items="string"), kind="R",
      group="valuation")
def list_dividend(world, sector):
    ts = world.data["tickers"]
    return [k for k in _sector(world, sector) if ts[k]["dividend"] > 0]


@tool(D, "count", "dividend", "Number of stocks in a sector that pay a cash dividend.",
      params={"sector": SECTOR}, returns=arg("integer", "integer"), kind="R", group="valuation")
def count_dividend(world, sector):
    return len(list_dividend(world, sector))


@tool(D, "get", "yield",
      "Dividend yield of a stock in percent: dividend per share / last close * 100.",
      params={"ticker": T}, returns=arg("number", "number"), kind="R", group="valuation")
def get_yield(world, ticker):
    t = _ticker(world, ticker)
    return t["dividend"] / t["closes"][-1] * 100.0


@tool(D, "compute", "yield", "Dividend yield in percent: dividend / price * 100.",
      params={"dividend": arg("number", "number", "dividend per share (>= 0)"),
              "price": arg("number", "number", "share price (> 0)")},
      returns=arg("number", "number"), kind="P", group="valuation")
def compute_yield(world, dividend, price):
    if dividend < 0:
        raise ToolError(f"dividend must be >= 0, got {dividend}")
    if price <= 0:
        raise ToolError(f"price must be positive, got {price}")
    return dividend / price * 100.0


@tool(D, "get", "cap",
      "Market capitalisation of a stock on a trading day, in millions: close * shares "
      "outstanding (millions).", params={"ticker": T, "date": DATE},
      returns=arg("number", "number"), kind="R", group="valuation")
def get_cap(world, ticker, date):
    return _cap(_ticker(world, ticker), _day(world, date))


@tool(D, "compare", "cap",
      "Of two stocks, the one with the larger market capitalisation on the last trading day.",
      params={"first": T1, "second": T2}, returns=arg("ticker", "string"), kind="R",
      group="valuation")
def compare_cap(world, first, second):
    return _better(world, first, second, lambda t: _cap(t, -1))
