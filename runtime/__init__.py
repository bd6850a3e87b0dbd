"""What every component runs on: settings, the declared Kafka topics, bounded shutdown."""
