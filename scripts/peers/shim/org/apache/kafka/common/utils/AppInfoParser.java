// Compiled by scripts/peers/kafka into its cache, beside the Kafka 4.4 jars.
//
// connect-file 4.4.0 is not on Maven Central, so the pom takes connect-file 4.3.1, whose
// FileStreamSourceConnector.version() and FileStreamSinkConnector.version() call
// org.apache.kafka.common.utils.AppInfoParser.getVersion(). kafka-clients 4.4 moved that class
// to org.apache.kafka.common.utils.internals, and without this one method the 4.4 Connect
// worker cannot load the file connectors (NoClassDefFoundError, HTTP 500 on their config).
package org.apache.kafka.common.utils;

public final class AppInfoParser {
  private AppInfoParser() {}

  public static String getVersion() {
    return org.apache.kafka.common.utils.internals.AppInfoParser.getVersion();
  }
}
