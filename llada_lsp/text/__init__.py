"""Open documents, their syntax trees and positions: what every other group reads."""
