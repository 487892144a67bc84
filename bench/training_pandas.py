"""The pandas side of bench/training.py: the same point-in-time training set as
`feature-connector offline training-set`, written the way a pandas user would (read the
table, join the entity rows with their entities' events, a filtered aggregate per window),
then compared with the connector's output.

usage: training_pandas.py TABLE_URL SPINE.parquet OURS.parquet OUT.parquet
Prints one JSON line: rows, mismatches (features differing from ours), seconds per step.
"""
import json, sys, time

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from deltalake import DeltaTable

HOUR, DAY = 3_600_000, 86_400_000
WINDOWS = {"1h": (HOUR, 300_000), "1d": (DAY, HOUR), "30d": (30 * DAY, DAY)}
AGGS = [("events", "count", None), ("score_sum", "sum", "score"), ("spend_avg", "avg", "spend_30d"),
        ("clicks_max", "max", "clicks_1h"), ("last_items", "last_k", "last_item_id")]


def ms(series):
    if isinstance(series.dtype, pd.DatetimeTZDtype):
        series = series.dt.tz_convert(None)
    if pd.api.types.is_datetime64_any_dtype(series):
        return pd.Series(series.values.astype("datetime64[ms]").astype("int64"), index=series.index)
    return series.astype("int64")


def main():
    table_url, spine_path, ours_path, out_path = sys.argv[1:5]
    steps = {}
    t0 = time.time()
    events = DeltaTable(table_url).to_pandas(
        columns=["entity_id", "event_time", "pulsar_publish_time", "score", "spend_30d", "clicks_1h", "last_item_id"])
    events["et"] = ms(events.pop("event_time"))
    events["pt"] = ms(events.pop("pulsar_publish_time"))
    steps["read_table_s"] = round(time.time() - t0, 2)
    t1 = time.time()
    spine = pd.read_parquet(spine_path)
    spine["row"] = np.arange(len(spine))
    spine["t"] = spine["event_timestamp"].astype("int64")
    reach = 30 * DAY + DAY
    joined = spine[["row", "entity_id", "t"]].merge(events, on="entity_id")
    joined = joined[(joined.pt <= joined.t) & (joined.et >= joined.t - reach) & (joined.et < joined.t + DAY)]
    steps["join_s"] = round(time.time() - t1, 2)
    t2 = time.time()
    out = spine[["entity_id", "event_timestamp"]].copy()
    for suffix, (length, hop) in WINDOWS.items():
        start = (np.floor((joined.t - length) / hop) * hop).astype("int64")
        end = (np.floor(joined.t / hop) * hop + hop).astype("int64")
        window = joined[(joined.et >= start) & (joined.et < end)]
        grouped = window.groupby("row")
        for name, function, column in AGGS:
            feature = f"{name}_{suffix}"
            if function == "count":
                values = grouped.size()
                out[feature] = values.reindex(out.index, fill_value=0).astype("int64")
            elif function == "sum":
                out[feature] = grouped[column].sum().reindex(out.index, fill_value=0.0)
            elif function == "avg":
                out[feature] = grouped[column].mean().reindex(out.index)
            elif function == "max":
                out[feature] = grouped[column].max().reindex(out.index)
            else:
                newest = window[window[column].notna()].sort_values(["row", "et", "pt"], ascending=[True, False, False])
                lists = newest.groupby("row").head(5).groupby("row")[column].agg(list)
                out[feature] = lists.reindex(out.index).apply(lambda v: v if isinstance(v, list) else [])
    steps["aggregate_s"] = round(time.time() - t2, 2)
    out.to_parquet(out_path)
    ours = pq.read_table(ours_path).to_pandas()
    mismatches = 0
    for name, function, _ in AGGS:
        for suffix in WINDOWS:
            feature = f"{name}_{suffix}"
            a, b = ours[feature], out[feature]
            if function == "last_k":
                differ = [list(x) != list(y) for x, y in zip(a, b)]
            else:
                a, b = a.astype("float64"), b.astype("float64")
                both_null = a.isna() & b.isna()
                close = np.isclose(a, b, rtol=1e-9, atol=1e-9)
                differ = ~(both_null | close)
            mismatches += int(np.sum(differ))
    print(json.dumps({"rows": len(out), "joined_rows": len(joined), "mismatches": mismatches, **steps}))


if __name__ == "__main__":
    main()
