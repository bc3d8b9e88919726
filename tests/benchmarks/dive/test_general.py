"""The general world: cities, holidays, units; one known-output test per tool, typing and
determinism."""

import datetime
import json
import math

import numpy as np
import pytest

from jaxpapers.benchmarks.dive.worlds import World, call_tool, domain_tools, make_world
from jaxpapers.benchmarks.dive.worlds.general import AREA_UNITS, LENGTH_UNITS

HOLIDAYS = {"New Year's Day": "2026-01-01", "Good Friday": "2026-04-03",
            "Easter Monday": "2026-04-06", "Christmas Day": "2026-12-25"}


def _city(country, offset, lat, lon, population, area, temperature):
    return {"country": country, "offset": offset, "lat": lat, "lon": lon,
            "population": population, "area": area, "temperature": temperature}


def _world() -> World:
    cities = {"Delhi": _city("India", 5.5, 28.7041, 77.1025, 16000000, 1600, 25.0),
              "London": _city("United Kingdom", 0, 51.5074, -0.1278, 9000000, 1500, 11.0),
              "Lyon": _city("France", 1, 45.764, 4.8357, 500000, 50, 13.0),
              "Paris": _city("France", 1, 48.8566, 2.3522, 2000000, 100, 12.0),
              "Tokyo": _city("Japan", 9, 35.6762, 139.6503, 14000000, 2194, 15.8)}
    data = {"cities": cities, "holidays": HOLIDAYS, "length_units": dict(LENGTH_UNITS),
            "area_units": dict(AREA_UNITS)}
    lexicon = {"city": tuple(sorted(cities)), "country": ("France", "India", "Japan",
                                                          "United Kingdom"),
               "holiday": tuple(sorted(HOLIDAYS))}
    return World("general", 0, data, lexicon)


W = _world()


def ok(name, **args):
    good, out = call_tool(W, f"general.{name}", args)
    assert good, out
    return out


def err(name, **args):
    good, out = call_tool(W, f"general.{name}", args)
    assert not good, out
    assert isinstance(out, str) and out
    return out


def _cosine_km(a, b):
    """Great-circle distance by the spherical law of cosines (independent of haversine)."""
    p1, l1, p2, l2 = (math.radians(v) for v in (a["lat"], a["lon"], b["lat"], b["lon"]))
    c = math.sin(p1) * math.sin(p2) + math.cos(p1) * math.cos(p2) * math.cos(l2 - l1)
    return 6371.0 * math.acos(max(-1.0, min(1.0, c)))


C = W.data["cities"]

# ----------------------------------------------------------------------------- cities


def test_get_country():
    assert ok("get_country", city="Lyon") == "France"
    assert "city" in err("get_country", city="Atlantis")


def test_list_country():
    assert ok("list_country", offset=1) == ["France"]
    assert ok("list_country", offset=5.5) == ["India"]
    assert ok("list_country", offset=3) == []


def test_list_city():
    assert ok("list_city", country="France") == ["Lyon", "Paris"]
    assert "country" in err("list_city", country="Atlantis")


def test_count_city():
    assert ok("count_city", country="France") == 2
    assert ok("count_city", country="Japan") == 1


def test_find_city():
    assert _cosine_km(C["Paris"], C["London"]) < _cosine_km(C["Paris"], C["Lyon"])
    assert ok("find_city", city="Paris") == "London"
    assert ok("find_city", city="Lyon") == "Paris"


def test_get_population():
    assert ok("get_population", city="Paris") == 2000000


def test_list_population():
    assert ok("list_population", country="France") == [500000, 2000000]  # Lyon, Paris


def test_compare_population():
    assert ok("compare_population", first="Paris", second="London") == "London"
    assert ok("compare_population", first="Tokyo", second="Lyon") == "Tokyo"
    assert "second" in err("compare_population", first="Paris", second="Nowhere")


def test_get_total():
    assert ok("get_total", country="France") == 2500000


def test_compute_total():
    assert ok("compute_total", values=[1, 2.5, 3]) == 6.5
    assert "at least one" in err("compute_total", values=[])
    assert "numbers" in err("compute_total", values=[1, True])


# ----------------------------------------------------------------------------- geography

def test_compute_distance():
    want = _cosine_km(C["Paris"], C["London"])
    assert ok("compute_distance", first="Paris", second="London") == pytest.approx(want, abs=1e-3)
    assert 340 < want < 347
    assert ok("compute_distance", first="Tokyo", second="Tokyo") == 0.0


def test_compare_distance():
    assert ok("compare_distance", origin="Paris", first="Lyon", second="London") == "London"
    # Delhi-Tokyo ~5,840 km, Delhi-London ~6,720 km
    assert _cosine_km(C["Delhi"], C["Tokyo"]) < _cosine_km(C["Delhi"], C["London"])
    assert ok("compare_distance", origin="Delhi", first="London", second="Tokyo") == "Tokyo"
    assert ok("compare_distance", origin="Delhi", first="Tokyo", second="London") == "Tokyo"


def test_convert_distance():
    assert ok("convert_distance", value=1, from_unit="mi", to_unit="km") == 1.609344
    assert ok("convert_distance", value=12, from_unit="in", to_unit="ft") == 1.0
    assert ok("convert_distance", value=3.5, from_unit="nmi", to_unit="m") == 6482.0
    assert "from_unit" in err("convert_distance", value=1, from_unit="league", to_unit="m")


def test_get_area():
    assert ok("get_area", city="Paris") == 100


def test_convert_area():
    assert ok("convert_area", value=1, from_unit="km2", to_unit="ha") == 100.0
    assert ok("convert_area", value=1, from_unit="acre", to_unit="m2") == 4046.856422
    assert ok("convert_area", value=640, from_unit="acre", to_unit="mi2") == pytest.approx(1.0)


def test_get_density():
    assert ok("get_density", city="Paris") == 20000.0


def test_compute_density():
    assert ok("compute_density", population=1000, area=4) == 250.0
    assert "area" in err("compute_density", population=1000, area=0)
    assert "population" in err("compute_density", population=-1, area=2.0)


def test_get_temperature():
    assert ok("get_temperature", city="Delhi") == 25.0


def test_convert_temperature():
    assert ok("convert_temperature", value=100, from_unit="C", to_unit="F") == 212.0
    assert ok("convert_temperature", value=32, from_unit="F", to_unit="K") == 273.15
    assert ok("convert_temperature", value=-40, from_unit="F", to_unit="C") == -40.0
    assert "absolute zero" in err("convert_temperature", value=-500, from_unit="C",
                                  to_unit="K")


# ----------------------------------------------------------------------------- clock

def test_get_offset():
    assert ok("get_offset", city="Delhi") == 5.5


def test_compute_offset():
    assert ok("compute_offset", first="London", second="Delhi") == 5.5
    assert ok("compute_offset", first="Tokyo", second="Paris") == -8


def test_convert_time():
    assert ok("convert_time", time="09:00", from_city="London", to_city="Delhi") == "14:30"
    assert ok("convert_time", time="23:00", from_city="Delhi", to_city="Tokyo") == "02:30"
    assert ok("convert_time", time="01:00", from_city="Paris", to_city="London") == "00:00"
    assert "HH:MM" in err("convert_time", time="25:00", from_city="Paris", to_city="London")
    assert "to_city" in err("convert_time", time="01:00", from_city="Paris", to_city="Oz")


def test_add_time():
    assert ok("add_time", time="23:30", minutes=45) == "00:15"
    assert ok("add_time", time="00:10", minutes=-20) == "23:50"


def test_round_time():
    assert ok("round_time", time="10:07", step=15) == "10:00"
    assert ok("round_time", time="10:08", step=15) == "10:15"
    assert ok("round_time", time="10:30", step=60) == "11:00"
    assert ok("round_time", time="23:50", step=30) == "00:00"
    assert "step" in err("round_time", time="10:00", step=0)


# ----------------------------------------------------------------------------- calendar

def test_add_days():
    assert ok("add_days", date="2026-12-30", days=5) == "2027-01-04"
    assert ok("add_days", date="2026-03-01", days=-1) == "2026-02-28"
    assert "days" in err("add_days", date="2026-03-01", days=40000)


def test_count_days():
    assert ok("count_days", start="2026-01-01", end="2026-03-01") == 59
    assert ok("count_days", start="2026-03-01", end="2026-01-01") == -59
    assert "not a valid date" in err("count_days", start="2026-02-30", end="2026-03-01")


def test_get_weekday():
    assert ok("get_weekday", date="2026-01-05") == "Monday"
    assert ok("get_weekday", date="2026-12-25") == "Friday"


def test_find_weekday():
    assert ok("find_weekday", date="2026-01-01", weekday="Monday") == "2026-01-05"
    assert ok("find_weekday", date="2026-01-01", weekday="Thursday") == "2026-01-01"
    assert "weekday" in err("find_weekday", date="2026-01-01", weekday="Funday")


def test_convert_date():
    assert ok("convert_date", date="2026-03-01") == 60
    assert ok("convert_date", date="2024-12-31") == 366


def test_get_date():
    assert ok("get_date", holiday="Good Friday") == "2026-04-03"
    assert "holiday" in err("get_date", holiday="Festivus")


def test_get_holiday():
    assert ok("get_holiday", date="2026-12-25") == "Christmas Day"
    assert "not a holiday" in err("get_holiday", date="2026-12-24")


def test_find_holiday():
    assert ok("find_holiday", date="2026-01-02") == "2026-04-03"
    assert ok("find_holiday", date="2026-04-03") == "2026-04-03"
    assert "no holiday" in err("find_holiday", date="2026-12-26")


def test_count_holiday():
    assert ok("count_holiday", start="2026-04-01", end="2026-04-30") == 2
    assert ok("count_holiday", start="2026-01-01", end="2026-01-01") == 1
    assert "after" in err("count_holiday", start="2026-05-01", end="2026-04-01")


def test_find_workday():
    hol = sorted(HOLIDAYS.values())
    for date, n in (("2026-04-02", 1), ("2026-04-03", 0), ("2026-04-02", 0),
                    ("2026-12-20", 10), ("2026-01-01", 0)):
        want = str(np.busday_offset(date, n, roll="forward", holidays=hol))
        assert ok("find_workday", date=date, days=n) == want
    assert ok("find_workday", date="2026-04-02", days=1) == "2026-04-07"
    assert "days" in err("find_workday", date="2026-04-02", days=-1)


def test_count_workday():
    assert ok("count_workday", start="2026-03-30", end="2026-04-10") == 8
    hol = sorted(HOLIDAYS.values())
    want = int(np.busday_count("2026-01-01", "2027-01-01", holidays=hol))
    assert ok("count_workday", start="2026-01-01", end="2026-12-31") == want


# ----------------------------------------------------------------------------- arithmetic

def test_round_number():
    assert ok("round_number", value=3.14159, digits=2) == 3.14
    assert ok("round_number", value=2.5, digits=0) == 3.0
    assert ok("round_number", value=2.675, digits=2) == 2.68
    assert ok("round_number", value=-1.25, digits=1) == -1.3
    assert "digits" in err("round_number", value=1.0, digits=7)


def test_compare_number():
    assert ok("compare_number", first=3, second=7.5) == 7.5
    assert ok("compare_number", first=-1, second=-2) == -1


# ----------------------------------------------------------------------------- framework

def test_bad_calls():
    assert "JSON type" in err("get_population", city=5)
    assert "JSON type" in err("add_days", date="2026-01-01", days=1.5)
    assert "one of" in err("convert_temperature", value=1, from_unit="R", to_unit="C")
    assert "missing" in err("compute_distance", first="Paris")
    assert "ISO" in err("get_weekday", date="05/01/2026")


def test_every_tool_has_a_known_output_test():
    names = {n.split(".", 1)[1] for n in domain_tools("general")}
    assert len(names) >= 21
    tested = {n[len("test_"):] for n in globals() if n.startswith("test_")}
    assert names <= tested, sorted(names - tested)


def test_world_contents():
    w = make_world("general", 0)
    cities, holidays = w.data["cities"], w.data["holidays"]
    assert len(cities) == 20 and list(w.lexicon["city"]) == sorted(cities)
    assert len(holidays) == 12 and len(set(holidays.values())) == 12
    assert all(h.startswith("2026-") for h in holidays.values())
    assert list(w.lexicon["country"]) == sorted({c["country"] for c in cities.values()})
    assert len(w.lexicon["date"]) == 365
    for c in cities.values():
        assert c["population"] > 0 and c["area"] > 0 and -90 <= c["lat"] <= 90
    json.dumps(w.data)


def test_tools_run_on_a_built_world():
    w = make_world("general", 7)
    for city in w.lexicon["city"]:
        good, country = call_tool(w, "general.get_country", {"city": city})
        assert good and city in call_tool(w, "general.list_city", {"country": country})[1]
        good, near = call_tool(w, "general.find_city", {"city": city})
        assert good and near != city
    for holiday in w.lexicon["holiday"]:
        good, date = call_tool(w, "general.get_date", {"holiday": holiday})
        assert good and call_tool(w, "general.get_holiday", {"date": date}) == (True, holiday)
        assert datetime.date.fromisoformat(date).year == 2026
