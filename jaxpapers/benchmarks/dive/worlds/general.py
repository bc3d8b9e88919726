"""General world: cities, a 2026 holiday calendar and unit tables.

The official DIVE general domain gives the agent web search, page browsing and a Python sandbox;
its tasks look facts up (a city's country, population, time zone, a holiday's date) and then
compute with them (distances, time-zone and unit conversions, date arithmetic, rounding). Offline,
a world holds:

* 20 cities drawn from a fixed catalogue of 30 (name, country, standard UTC offset in hours,
  latitude / longitude, area in km^2), each with a seeded population (the catalogue figure
  scaled by 0.9-1.1) and a seeded annual mean temperature (the catalogue figure +- 1 degree C);
* 12 named holidays drawn from a catalogue of 20 with their 2026 dates;
* unit tables: length (to metres), area (to square metres) and temperature scales.

Retrieval (``"R"``) tools stand in for the search / browse lookups (and for the calendar and
geography a sandbox would need); processing (``"P"``) tools stand in for sandbox computations:
unit conversion, clock-time and date arithmetic, sums, rounding. Dates are ISO ``YYYY-MM-DD``
strings, clock times ``HH:MM`` (24 h).
"""

from __future__ import annotations

import datetime
import decimal
import math
import random
import re

from jaxpapers.benchmarks.dive.worlds._core import ToolError, World, arg, register_world, tool

D = "general"
N_CITIES = 20
N_HOLIDAYS = 12
EARTH_RADIUS_KM = 6371.0
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
LENGTH_UNITS = {"mm": 0.001, "cm": 0.01, "m": 1.0, "km": 1000.0, "in": 0.0254, "ft": 0.3048,
                "yd": 0.9144, "mi": 1609.344, "nmi": 1852.0}
AREA_UNITS = {"m2": 1.0, "km2": 1e6, "ha": 1e4, "acre": 4046.8564224, "ft2": 0.09290304,
              "mi2": 2589988.110336}
TEMPERATURE_UNITS = ("C", "F", "K")

# name, country, UTC offset (h, standard time), latitude, longitude, population, area km^2,
# annual mean temperature (C): rounded public figures.
_CITIES = (
    ("Beijing", "China", 8, 39.9042, 116.4074, 21540000, 16411, 12.9),
    ("Berlin", "Germany", 1, 52.52, 13.405, 3650000, 892, 10.3),
    ("Buenos Aires", "Argentina", -3, -34.6037, -58.3816, 3080000, 203, 17.9),
    ("Cairo", "Egypt", 2, 30.0444, 31.2357, 9540000, 3085, 22.1),
    ("Chicago", "United States", -6, 41.8781, -87.6298, 2700000, 606, 10.4),
    ("Delhi", "India", 5.5, 28.7041, 77.1025, 16790000, 1484, 25.0),
    ("Johannesburg", "South Africa", 2, -26.2041, 28.0473, 5640000, 1645, 16.0),
    ("London", "United Kingdom", 0, 51.5074, -0.1278, 8980000, 1572, 11.3),
    ("Los Angeles", "United States", -8, 34.0522, -118.2437, 3900000, 1302, 18.6),
    ("Lyon", "France", 1, 45.764, 4.8357, 520000, 48, 12.5),
    ("Manchester", "United Kingdom", 0, 53.4808, -2.2426, 550000, 116, 10.2),
    ("Melbourne", "Australia", 10, -37.8136, 144.9631, 5080000, 9993, 15.1),
    ("Mexico City", "Mexico", -6, 19.4326, -99.1332, 9210000, 1485, 16.6),
    ("Moscow", "Russia", 3, 55.7558, 37.6173, 12600000, 2511, 5.8),
    ("Mumbai", "India", 5.5, 19.076, 72.8777, 12440000, 603, 27.2),
    ("Munich", "Germany", 1, 48.1351, 11.582, 1490000, 311, 9.7),
    ("Nairobi", "Kenya", 3, -1.2921, 36.8219, 4400000, 696, 19.0),
    ("New York", "United States", -5, 40.7128, -74.006, 8340000, 783, 13.2),
    ("Osaka", "Japan", 9, 34.6937, 135.5023, 2750000, 225, 16.9),
    ("Paris", "France", 1, 48.8566, 2.3522, 2160000, 105, 12.3),
    ("Rio de Janeiro", "Brazil", -3, -22.9068, -43.1729, 6750000, 1200, 23.8),
    ("Sao Paulo", "Brazil", -3, -23.5505, -46.6333, 12330000, 1521, 19.2),
    ("Seoul", "South Korea", 9, 37.5665, 126.978, 9700000, 605, 12.5),
    ("Shanghai", "China", 8, 31.2304, 121.4737, 24870000, 6341, 17.1),
    ("Shenzhen", "China", 8, 22.5431, 114.0579, 17560000, 1997, 23.0),
    ("Singapore", "Singapore", 8, 1.3521, 103.8198, 5690000, 728, 27.5),
    ("Sydney", "Australia", 10, -33.8688, 151.2093, 5310000, 12368, 18.4),
    ("Tokyo", "Japan", 9, 35.6762, 139.6503, 13960000, 2194, 15.8),
    ("Toronto", "Canada", -5, 43.6532, -79.3832, 2790000, 630, 9.4),
    ("Vancouver", "Canada", -8, 49.2827, -123.1207, 660000, 115, 11.0),
)
_HOLIDAYS = (
    ("New Year's Day", "2026-01-01"), ("Martin Luther King Jr. Day", "2026-01-19"),
    ("Lunar New Year", "2026-02-17"), ("International Women's Day", "2026-03-08"),
    ("Good Friday", "2026-04-03"), ("Easter Monday", "2026-04-06"),
    ("Earth Day", "2026-04-22"), ("Labour Day", "2026-05-01"),
    ("Memorial Day", "2026-05-25"), ("Dragon Boat Festival", "2026-06-19"),
    ("Canada Day", "2026-07-01"), ("Independence Day", "2026-07-04"),
    ("Bastille Day", "2026-07-14"), ("Labor Day", "2026-09-07"),
    ("Mid-Autumn Festival", "2026-09-25"), ("National Day", "2026-10-01"),
    ("Armistice Day", "2026-11-11"), ("Thanksgiving", "2026-11-26"),
    ("Christmas Day", "2026-12-25"), ("Boxing Day", "2026-12-26"),
)
_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIME_RE = re.compile(r"([01]\d|2[0-3]):([0-5]\d)")
_MAX_DAYS = 36500


@register_world(D)
def build(rng: random.Random) -> tuple[dict, dict]:
    cities = {}
    for name, country, offset, lat, lon, pop, area, temp in sorted(rng.sample(_CITIES, N_CITIES)):
        cities[name] = {"country": country, "offset": offset, "lat": lat, "lon": lon,
                        "population": int(round(pop * rng.uniform(0.9, 1.1), -3)),
                        "area": area, "temperature": round(temp + rng.uniform(-1.0, 1.0), 1)}
    holidays = {n: d for n, d in sorted(rng.sample(_HOLIDAYS, N_HOLIDAYS), key=lambda h: h[1])}
    year = [(datetime.date(2026, 1, 1) + datetime.timedelta(days=i)).isoformat()
            for i in range(365)]
    data = {"cities": cities, "holidays": holidays,
            "length_units": dict(LENGTH_UNITS), "area_units": dict(AREA_UNITS)}
    lexicon = {"city": sorted(cities), "country": sorted({c["country"] for c in cities.values()}),
               "holiday": sorted(holidays), "date": year, "weekday": list(WEEKDAYS),
               "time": [f"{m // 60:02d}:{m % 60:02d}" for m in range(0, 1440, 30)],
               "length_unit": sorted(LENGTH_UNITS), "area_unit": sorted(AREA_UNITS),
               "temperature_unit": list(TEMPERATURE_UNITS)}
    return data, lexicon


# ----------------------------------------------------------------------------- helpers

def _city(world: World, city: str, name: str = "city") -> dict:
    c = world.data["cities"].get(city)
    if c is None:
        raise ToolError(f"{name} {city!r} is not a known city")
    return c


def _country(world: World, country: str) -> list[str]:
    names = sorted(n for n, c in world.data["cities"].items() if c["country"] == country)
    if not names:
        raise ToolError(f"country {country!r} has no known city")
    return names


def _date(date: str, name: str = "date") -> datetime.date:
    if not _DATE_RE.fullmatch(date):
        raise ToolError(f"{name} {date!r} is not an ISO date YYYY-MM-DD")
    try:
        return datetime.date.fromisoformat(date)
    except ValueError:
        raise ToolError(f"{name} {date!r} is not a valid date") from None


def _minutes(time: str, name: str = "time") -> int:
    m = _TIME_RE.fullmatch(time)
    if m is None:
        raise ToolError(f"{name} {time!r} is not a 24-hour clock time HH:MM")
    return int(m.group(1)) * 60 + int(m.group(2))


def _clock(minutes: int) -> str:
    minutes %= 1440
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _shift(d: datetime.date, days: int) -> datetime.date:
    try:
        return d + datetime.timedelta(days=days)
    except OverflowError:
        raise ToolError("the resulting date is out of range") from None


def _haversine(a: dict, b: dict) -> float:
    p1, p2 = math.radians(a["lat"]), math.radians(b["lat"])
    dp, dl = p2 - p1, math.radians(b["lon"] - a["lon"])
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2.0 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))


def _unit(table: dict, unit: str, name: str) -> float:
    if unit not in table:
        raise ToolError(f"{name} {unit!r} is not one of {sorted(table)}")
    return table[unit]


def _numbers(values: list, name: str = "values") -> list[float]:
    if not values:
        raise ToolError(f"{name} must hold at least one number")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ToolError(f"{name} must hold finite numbers, got {v!r}")
    return list(values)


def _holidays(world: World) -> dict[str, str]:
    return world.data["holidays"]


def _workday(holidays: set[str], d: datetime.date) -> bool:
    return d.weekday() < 5 and d.isoformat() not in holidays


CITY = arg("city", "string", "city name")
C1 = arg("city", "string", "first city")
C2 = arg("city", "string", "second city")
COUNTRY = arg("country", "string", "country name")
DATE = arg("date", "string", "ISO date YYYY-MM-DD")
START = arg("date", "string", "first date (inclusive), ISO YYYY-MM-DD")
END = arg("date", "string", "last date (inclusive), ISO YYYY-MM-DD")
TIME = arg("time", "string", "24-hour clock time HH:MM")
VALUE = arg("number", "number", "value to convert")

# ----------------------------------------------------------------------------- cities


@tool(D, "get", "country", "Country a city is in.", params={"city": CITY},
      returns=arg("country", "string"), kind="R", group="cities")
def get_country(world, city):
    return _city(world, city)["country"]


@tool(D, "list", "country",
      "Countries (sorted) with a known city whose standard UTC offset is the given number of "
      "hours.", params={"offset": arg("number", "number", "UTC offset in hours, e.g. 5.5")},
      returns=arg("country", "array", items="string"), kind="R", group="cities")
def list_country(world, offset):
    return sorted({c["country"] for c in world.data["cities"].values() if c["offset"] == offset})


@tool(D, "list", "city", "Known cities of a country (sorted).", params={"country": COUNTRY},
      returns=arg("city", "array", items="string"), kind="R", group="cities")
def list_city(world, country):
    return _country(world, country)


@tool(D, "count", "city", "Number of known cities in a country.", params={"country": COUNTRY},
      returns=arg("integer", "integer"), kind="R", group="cities")
def count_city(world, country):
    return len(_country(world, country))


@tool(D, "find", "city", "The known city nearest to a city (great-circle distance).",
      params={"city": CITY}, returns=arg("city", "string"), kind="R", group="cities")
def find_city(world, city):
    here = _city(world, city)
    others = [(n, c) for n, c in world.data["cities"].items() if n != city]
    if not others:
        raise ToolError("there is no other city")
    return min(others, key=lambda nc: (_haversine(here, nc[1]), nc[0]))[0]


@tool(D, "get", "population", "Population of a city.", params={"city": CITY},
      returns=arg("integer", "integer"), kind="R", group="cities")
def get_population(world, city):
    return _city(world, city)["population"]


@tool(D, "list", "population",
      "Populations of a country's known cities, in the order of their sorted names.",
      params={"country": COUNTRY}, returns=arg("number", "array", items="integer"), kind="R",
      group="cities")
def list_population(world, country):
    return [world.data["cities"][n]["population"] for n in _country(world, country)]


@tool(D, "compare", "population", "Of two cities, the more populous one.",
      params={"first": C1, "second": C2}, returns=arg("city", "string"), kind="R",
      group="cities")
def compare_population(world, first, second):
    a, b = _city(world, first, "first"), _city(world, second, "second")
    return second if b["population"] > a["population"] else first


@tool(D, "get", "total", "Total population of a country's known cities.",
      params={"country": COUNTRY}, returns=arg("integer", "integer"), kind="R", group="cities")
def get_total(world, country):
    return sum(list_population(world, country))


# ----------------------------------------------------------------------------- geography


@tool(D, "compute", "distance", "Great-circle (haversine) distance between two cities in km.",
      params={"first": C1, "second": C2}, returns=arg("number", "number"), kind="R",
      group="geography")
def compute_distance(world, first, second):
    return _haversine(_city(world, first, "first"), _city(world, second, "second"))


@tool(D, "compare", "distance",
      "Of two cities, the one nearer to an origin city (great-circle distance).",
      params={"origin": arg("city", "string", "origin city"), "first": C1, "second": C2},
      returns=arg("city", "string"), kind="R", group="geography")
def compare_distance(world, origin, first, second):
    o = _city(world, origin, "origin")
    a, b = _city(world, first, "first"), _city(world, second, "second")
    return second if _haversine(o, b) < _haversine(o, a) else first


@tool(D, "convert", "distance", "Convert a length between units (mm, cm, m, km, in, ft, yd, mi, "
      "nmi).", params={"value": VALUE,
                       "from_unit": arg("length_unit", "string", enum=tuple(LENGTH_UNITS)),
                       "to_unit": arg("length_unit", "string", enum=tuple(LENGTH_UNITS))},
      returns=arg("number", "number"), kind="P", group="geography")
def convert_distance(world, value, from_unit, to_unit):
    units = world.data["length_units"]
    return value * _unit(units, from_unit, "from_unit") / _unit(units, to_unit, "to_unit")


@tool(D, "get", "area", "Land area of a city in km^2.", params={"city": CITY},
      returns=arg("number", "number"), kind="R", group="geography")
def get_area(world, city):
    return _city(world, city)["area"]


@tool(D, "convert", "area", "Convert an area between units (m2, km2, ha, acre, ft2, mi2).",
      params={"value": VALUE, "from_unit": arg("area_unit", "string", enum=tuple(AREA_UNITS)),
              "to_unit": arg("area_unit", "string", enum=tuple(AREA_UNITS))},
      returns=arg("number", "number"), kind="P", group="geography")
def convert_area(world, value, from_unit, to_unit):
    units = world.data["area_units"]
    return value * _unit(units, from_unit, "from_unit") / _unit(units, to_unit, "to_unit")


@tool(D, "get", "density", "Population density of a city in people per km^2.",
      params={"city": CITY}, returns=arg("number", "number"), kind="R", group="geography")
def get_density(world, city):
    c = _city(world, city)
    return c["population"] / c["area"]


@tool(D, "compute", "density", "Population density: population / area.",
      params={"population": arg("integer", "integer", "number of people (>= 0)"),
              "area": arg("number", "number", "area (> 0)")},
      returns=arg("number", "number"), kind="P", group="geography")
def compute_density(world, population, area):
    if population < 0:
        raise ToolError(f"population must be >= 0, got {population}")
    if area <= 0:
        raise ToolError(f"area must be positive, got {area}")
    return population / area


@tool(D, "get", "temperature", "Annual mean temperature of a city in degrees Celsius.",
      params={"city": CITY}, returns=arg("number", "number"), kind="R", group="geography")
def get_temperature(world, city):
    return _city(world, city)["temperature"]


@tool(D, "convert", "temperature",
      "Convert a temperature between scales: C (Celsius), F (Fahrenheit), K (Kelvin).",
      params={"value": VALUE,
              "from_unit": arg("temperature_unit", "string", enum=TEMPERATURE_UNITS),
              "to_unit": arg("temperature_unit", "string", enum=TEMPERATURE_UNITS)},
      returns=arg("number", "number"), kind="P", group="geography")
def convert_temperature(world, value, from_unit, to_unit):
    to_c = {"C": lambda v: v, "F": lambda v: (v - 32.0) * 5.0 / 9.0, "K": lambda v: v - 273.15}
    from_c = {"C": lambda v: v, "F": lambda v: v * 9.0 / 5.0 + 32.0, "K": lambda v: v + 273.15}
    for name, u in (("from_unit", from_unit), ("to_unit", to_unit)):
        if u not in to_c:
            raise ToolError(f"{name} {u!r} is not one of {list(TEMPERATURE_UNITS)}")
    celsius = to_c[from_unit](float(value))
    if celsius < -273.15 - 1e-9:
        raise ToolError(f"value {value} {from_unit} is below absolute zero")
    return from_c[to_unit](celsius)


# ----------------------------------------------------------------------------- clock


@tool(D, "get", "offset", "Standard-time UTC offset of a city in hours.", params={"city": CITY},
      returns=arg("number", "number"), kind="R", group="clock")
def get_offset(world, city):
    return _city(world, city)["offset"]


@tool(D, "compute", "offset",
      "Time difference in hours from the first city to the second (second's UTC offset minus "
      "first's).", params={"first": C1, "second": C2}, returns=arg("number", "number"),
      kind="R", group="clock")
def compute_offset(world, first, second):
    return _city(world, second, "second")["offset"] - _city(world, first, "first")["offset"]


@tool(D, "convert", "time",
      "Convert a local clock time in one city to the local clock time in another (standard "
      "time; wraps around midnight).",
      params={"time": TIME, "from_city": arg("city", "string", "city whose local time is given"),
              "to_city": arg("city", "string", "city whose local time is wanted")},
      returns=arg("time", "string"), kind="R", group="clock")
def convert_time(world, time, from_city, to_city):
    shift = _city(world, to_city, "to_city")["offset"] - _city(world, from_city,
                                                                "from_city")["offset"]
    return _clock(_minutes(time) + int(round(shift * 60)))


@tool(D, "add", "time", "Clock time a number of minutes later (negative: earlier), wrapping.",
      params={"time": TIME, "minutes": arg("integer", "integer", "minutes to add")},
      returns=arg("time", "string"), kind="P", group="clock")
def add_time(world, time, minutes):
    return _clock(_minutes(time) + minutes)


@tool(D, "round", "time",
      "Round a clock time to the nearest multiple of a step in minutes (halves round up).",
      params={"time": TIME, "step": arg("integer", "integer", "step in minutes, 1 to 720")},
      returns=arg("time", "string"), kind="P", group="clock")
def round_time(world, time, step):
    if not 1 <= step <= 720:
        raise ToolError(f"step must be between 1 and 720 minutes, got {step}")
    return _clock((2 * _minutes(time) + step) // (2 * step) * step)


# ----------------------------------------------------------------------------- calendar


@tool(D, "add", "days", "Date a number of days after a date (negative: before).",
      params={"date": DATE, "days": arg("integer", "integer", "days to add")},
      returns=arg("date", "string"), kind="P", group="calendar")
def add_days(world, date, days):
    if abs(days) > _MAX_DAYS:
        raise ToolError(f"days must be within +-{_MAX_DAYS}, got {days}")
    return _shift(_date(date), days).isoformat()


@tool(D, "count", "days", "Days from the first date to the second (negative if earlier).",
      params={"start": arg("date", "string", "first date"),
              "end": arg("date", "string", "second date")},
      returns=arg("integer", "integer"), kind="P", group="calendar")
def count_days(world, start, end):
    return (_date(end, "end") - _date(start, "start")).days


@tool(D, "get", "weekday", "Day of the week of a date (Monday ... Sunday).",
      params={"date": DATE}, returns=arg("weekday", "string"), kind="P", group="calendar")
def get_weekday(world, date):
    return WEEKDAYS[_date(date).weekday()]


@tool(D, "find", "weekday", "The first date on or after a date that falls on a given weekday.",
      params={"date": DATE, "weekday": arg("weekday", "string", enum=WEEKDAYS)},
      returns=arg("date", "string"), kind="P", group="calendar")
def find_weekday(world, date, weekday):
    if weekday not in WEEKDAYS:
        raise ToolError(f"weekday {weekday!r} is not one of {list(WEEKDAYS)}")
    d = _date(date)
    return _shift(d, (WEEKDAYS.index(weekday) - d.weekday()) % 7).isoformat()


@tool(D, "convert", "date", "Day of the year of a date (1 for January 1st).",
      params={"date": DATE}, returns=arg("integer", "integer"), kind="P", group="calendar")
def convert_date(world, date):
    return _date(date).timetuple().tm_yday


@tool(D, "get", "date", "Date of a holiday in 2026.",
      params={"holiday": arg("holiday", "string", "holiday name")},
      returns=arg("date", "string"), kind="R", group="calendar")
def get_date(world, holiday):
    d = _holidays(world).get(holiday)
    if d is None:
        raise ToolError(f"holiday {holiday!r} is not in the calendar")
    return d


@tool(D, "get", "holiday", "Name of the holiday falling on a date.", params={"date": DATE},
      returns=arg("holiday", "string"), kind="R", group="calendar")
def get_holiday(world, date):
    _date(date)
    for name, d in _holidays(world).items():
        if d == date:
            return name
    raise ToolError(f"date {date} is not a holiday in the calendar")


@tool(D, "find", "holiday", "Date of the first holiday on or after a date.",
      params={"date": DATE}, returns=arg("date", "string"), kind="R", group="calendar")
def find_holiday(world, date):
    _date(date)
    later = sorted(d for d in _holidays(world).values() if d >= date)
    if not later:
        raise ToolError(f"no holiday in the calendar on or after {date}")
    return later[0]


@tool(D, "count", "holiday", "Number of holidays from start to end (inclusive).",
      params={"start": START, "end": END}, returns=arg("integer", "integer"), kind="R",
      group="calendar")
def count_holiday(world, start, end):
    if _date(start, "start") > _date(end, "end"):
        raise ToolError(f"start {start} is after end {end}")
    return sum(start <= d <= end for d in _holidays(world).values())


@tool(D, "find", "workday",
      "The date a number of workdays (weekdays that are not holidays) after a date; 0 gives the "
      "first workday on or after it.",
      params={"date": DATE, "days": arg("integer", "integer", "workdays to advance, 0 to 3650")},
      returns=arg("date", "string"), kind="R", group="calendar")
def find_workday(world, date, days):
    if not 0 <= days <= 3650:
        raise ToolError(f"days must be between 0 and 3650, got {days}")
    off, d = set(_holidays(world).values()), _date(date)
    while not _workday(off, d):
        d = _shift(d, 1)
    for _ in range(days):
        d = _shift(d, 1)
        while not _workday(off, d):
            d = _shift(d, 1)
    return d.isoformat()


@tool(D, "count", "workday",
      "Number of workdays (weekdays that are not holidays) from start to end (inclusive).",
      params={"start": START, "end": END}, returns=arg("integer", "integer"), kind="R",
      group="calendar")
def count_workday(world, start, end):
    a, b = _date(start, "start"), _date(end, "end")
    if a > b:
        raise ToolError(f"start {start} is after end {end}")
    if (b - a).days > _MAX_DAYS:
        raise ToolError(f"the range is longer than {_MAX_DAYS} days")
    off = set(_holidays(world).values())
    return sum(_workday(off, a + datetime.timedelta(days=i)) for i in range((b - a).days + 1))


# ----------------------------------------------------------------------------- arithmetic


@tool(D, "compute", "total", "Sum of a list of numbers.",
      params={"values": arg("number", "array", "numbers to add", items="number")},
      returns=arg("number", "number"), kind="P", group="arithmetic")
def compute_total(world, values):
    try:
        return math.fsum(_numbers(values))
    except OverflowError as e:  # e.g. [1e308, 1e308]
        raise ToolError(f"values: the total overflows ({e})") from None


@tool(D, "round", "number",
      "Round a number to a number of decimal places (0 to 6); halves round away from zero.",
      params={"value": arg("number", "number", "value to round"),
              "digits": arg("integer", "integer", "decimal places, 0 to 6")},
      returns=arg("number", "number"), kind="P", group="arithmetic")
def round_number(world, value, digits):
    if not 0 <= digits <= 6:
        raise ToolError(f"digits must be between 0 and 6, got {digits}")
    step = decimal.Decimal(1).scaleb(-digits)
    q = decimal.Decimal(repr(value)).quantize(step, rounding=decimal.ROUND_HALF_UP,
                                              context=decimal.Context(prec=400))
    return float(q)


@tool(D, "compare", "number", "The larger of two numbers.",
      params={"first": arg("number", "number"), "second": arg("number", "number")},
      returns=arg("number", "number"), kind="P", group="arithmetic")
def compare_number(world, first, second):
    return second if second > first else first
