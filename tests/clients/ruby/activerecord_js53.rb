# ActiveRecord 6.1 on a server in the js53 layout: the recipe of docs/clients/ruby.md ("With the
# js53 layout"), IDs as plain JSON numbers, kept exactly also by a reader taking doubles.
# Connects as PGHOST, PGPORT, PGUSER and PGDATABASE say; exits 1 on the first claim that fails.
require "active_record"
require "json"

def check(ok, what)
  return if ok
  warn "activerecord-js53: FAILED: #{what}"
  exit 1
end

ActiveRecord::Migration.verbose = false
ActiveRecord::Base.establish_connection(
  adapter: "postgresql", host: ENV.fetch("PGHOST"), port: ENV.fetch("PGPORT"),
  username: ENV.fetch("PGUSER"), database: ENV.fetch("PGDATABASE")
)
conn = ActiveRecord::Base.connection
check(conn.select_value("SHOW snowflake_id.id_bits") == "53", "the server does not run the js53 layout")
conn.execute(<<~SQL)
  CREATE TABLE orders (
    id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),
    customer text NOT NULL
  )
SQL

# region: js53
# Where snowflake_id.layout = 'js53' every ID is at most 2^53 - 1: the model's default JSON,
# the ID as a number, is kept exactly by JavaScript and any reader taking doubles.
class Order < ActiveRecord::Base
end
order = Order.create!(customer: "ada")
body = order.to_json # {"id":1425...,"customer":"ada"}
# endregion
text = conn.select_value("SELECT id::text FROM orders WHERE id = #{Integer(order.id)}")
check(order.id.to_s == text, "the key #{order.id} vs the stored #{text}")
check(body == %({"id":#{text},"customer":"ada"}), "the body #{body} does not carry #{text} as a number")
check(JSON.parse(body)["id"] == order.id, "JSON.parse of the body")
check(Float(JSON.parse(body)["id"]).to_i == order.id, "the body's ID read as a double")
server_json = conn.select_value("SELECT snowflake_json(#{Integer(order.id)})::text")
check(Float(JSON.parse(server_json)["id"]).to_i == order.id, "snowflake_json #{server_json} read as a double")

customers = (0...1000).map { |i| "customer #{i}" }
ids = Order.insert_all(customers.map { |customer| { customer: customer } }, returning: %w[id]).rows.map(&:first)
check(ids.size == customers.size, "#{ids.size} batch keys")
check(ids.each_cons(2).all? { |a, b| a < b }, "batch keys not increasing")
stored = conn.select_values("SELECT id::text FROM orders WHERE customer <> 'ada' ORDER BY id")
through_doubles = JSON.parse(JSON.generate(ids)).map { |id| Float(id).to_i.to_s }
check(through_doubles == stored, "batch keys through JSON read as doubles vs stored")
puts "activerecord #{ActiveRecord::VERSION::STRING} on js53: 1 key and #{ids.size} batch keys as JSON numbers, " \
     "every digit the stored one read back as doubles; snowflake_json read alike"
