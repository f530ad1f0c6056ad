"""crr on Spark: a site whose relations and views are Parquet tables maintained by Spark jobs.

``from crr.spark import SparkSite`` (needs pyspark and a Java runtime). See :mod:`crr.spark.site`.
"""

from crr.spark.site import SparkSite

__all__ = ["SparkSite"]
