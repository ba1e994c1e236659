#include "engine/synth/corpus.h"

namespace stepserve::synth {
namespace {

// Written for this repository. Kept varied (topics, casing, punctuation, numbers, code, CJK) so
// that the learned merges resemble those of a real byte-level vocabulary.
constexpr char kCorpus[] =
    R"CORPUS(The river starts high in the mountains, where snow melts slowly through the spring.
By the time it reaches the valley, it has gathered the water of a hundred small streams.
Farmers along its banks have always depended on it, and they watch the level of the water
every morning before they decide what to plant, when to harvest, and how much to store.

In the old town there is a library with a green door. Inside, the shelves reach the ceiling,
and a narrow ladder rolls along a brass rail. The librarian knows where every book belongs,
although she insists that the catalogue is the only reliable guide. Visitors come to read
history, poetry, mathematics and travel stories; children come for the maps.

A good engineer reads the specification before writing the code. She asks what the inputs
are, what the outputs must be, and what should happen when something goes wrong. Then she
writes a small test that fails, makes it pass, and repeats. The result is not always elegant,
but it is correct, and correctness is what the users of a system notice first.

Weather report: on Monday the temperature will rise to 21 degrees, with light wind from the
west. Tuesday brings clouds and a 40% chance of rain. By Wednesday evening a cold front
arrives, and temperatures drop to 9 degrees overnight. Thursday and Friday remain cool and dry.

The committee met on 12 March 2024 and approved the budget of 1,250,000 dollars for the new
bridge. Construction is expected to take 18 months. The bridge will be 340 meters long and
carry two lanes of traffic, a cycle path, and a walkway on each side.

"Where are you going?" asked the old man. "To the market," she answered, "and then to the
station. My train leaves at half past four." He nodded, wished her a safe journey, and went
back to reading his newspaper in the shade of the tall chestnut tree.

Learning a language takes patience. At first every sentence is a puzzle: the words are
unfamiliar, the grammar seems arbitrary, and the sounds do not match the spelling. After a
few months, patterns appear. Common phrases become automatic, and you begin to think in the
new language instead of translating every word in your head.

Transformers process text as a sequence of tokens. Each token is mapped to a vector, the
vectors pass through many layers of attention and feed-forward networks, and the final layer
predicts the next token. Mixture-of-experts models route every token to a few experts out of
many, which keeps the cost of a forward pass low while the total number of parameters is large.
Speculative decoding uses a small draft model to propose several tokens at once; the large
model then verifies them in a single step and accepts the longest correct prefix.

The kitchen smelled of fresh bread and coffee. On the table there were eggs, butter, cheese,
apples, oranges, a jar of honey and a bowl of strawberries. Everyone talked at the same time,
passing plates, laughing, and planning the day: a walk to the lake, lunch in the village,
and a long afternoon of games, music and conversation.

Questions to consider: What is the difference between latency and throughput? Why does a
cache improve performance, and when can it make things worse? How would you measure the
effect of a change without being misled by noise? Which assumptions did you make, and which
of them would you test first?

The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs. How
vexingly quick daft zebras jump! Sphinx of black quartz, judge my vow. The five boxing wizards
jump quickly. Jackdaws love my big sphinx of quartz.

Dear customer, thank you for your order. Your package has been shipped and should arrive
within 3 to 5 business days. You can track it with the number below. If you have any questions,
please reply to this message and our support team will be happy to help you.

Chapter One. It was late in the autumn when the letter arrived. The envelope was thick and
yellow, addressed in careful handwriting that nobody in the house recognised. Mother turned
it over twice before she opened it, and then she sat down very slowly, as if the chair might
not be there.

int main(int argc, char** argv) {
  std::vector<int> values = {3, 1, 4, 1, 5, 9, 2, 6};
  std::sort(values.begin(), values.end());
  for (int v : values) {
    std::printf("%d\n", v);
  }
  return 0;
}

def fibonacci(n):
    """Return the first n Fibonacci numbers."""
    result = [0, 1]
    while len(result) < n:
        result.append(result[-1] + result[-2])
    return result[:n]

if __name__ == "__main__":
    print(fibonacci(10))

SELECT name, count(*) AS total FROM orders WHERE status = 'shipped' GROUP BY name ORDER BY total DESC;

{"model": "step35", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 128}

const server = http.createServer((request, response) => {
  response.writeHead(200, {"Content-Type": "text/plain"});
  response.end("hello world\n");
});

Version 2.4.1 fixes a crash when the configuration file is empty, improves the error message
for invalid ports, and adds the option --verbose. Upgrade with: pip install --upgrade tool==2.4.1

今天天气很好，我们去公园散步吧。
机器学习模型需要大量的数据和计算资源。
这本书讲述了一个关于友谊和勇气的故事。
東京は日本の首都です。電車はとても便利です。
ありがとうございます。また明日会いましょう。
カタカナとひらがなを勉強しています。

History teaches that great changes often begin quietly. A new tool appears, a few people try
it, and for years nothing seems to happen. Then, almost suddenly, it is everywhere, and it is
hard to remember how life worked before. The printing press, the steam engine, electricity,
the telephone, the computer and the network all followed this path.

Gardening advice for April: prepare the soil, remove weeds, and add compost. Sow peas, beans,
carrots and lettuce directly in the ground. Tomatoes and peppers should stay indoors until the
nights are warmer. Water in the morning, not in the evening, to keep the leaves dry overnight.

The orchestra tuned their instruments while the audience found their seats. When the lights
dimmed, the conductor raised his baton, and the first notes of the symphony filled the hall:
quiet at first, then stronger, until the whole building seemed to vibrate with the music.

Safety first: always read the instructions before using the machine. Wear protective glasses
and gloves. Keep children and pets away from the working area. Disconnect the power supply
before cleaning or changing parts, and store the tool in a dry place when you are finished.

Numbers and units: 1 kilometre is 1000 metres; 1 hour has 3600 seconds; water boils at 100
degrees Celsius at sea level; the speed of light is about 299792 kilometres per second; a
year has 365 days, or 366 in a leap year such as 2028.

Astronomy notes: Jupiter is the largest planet in our solar system, with dozens of moons. Saturn
is famous for its rings, which are made of ice and rock. Mars appears reddish because of iron
oxide on its surface. Venus rotates backwards, so the sun rises in the west there. Neptune was
discovered through mathematics before anyone observed it through a telescope.

Recipe for vegetable soup: chop two onions, three carrots, a leek and some celery. Fry them
gently in olive oil, add crushed garlic, then pour in stock. Simmer for twenty minutes, season
with salt, pepper, thyme and parsley, and blend half of it for a thicker texture. Serve hot with
toasted sourdough and grated parmesan.

Football report: the visitors dominated possession during the first half, but the home team
scored twice on the counterattack. After the break, a brilliant free kick reduced the deficit;
however, the goalkeeper made several spectacular saves, and the match finished two goals to one.
Supporters celebrated long after the final whistle.

Medical advice is not a substitute for a consultation. Symptoms such as persistent fever, severe
headache, chest pain or difficulty breathing require immediate attention. Regular exercise,
balanced nutrition, adequate sleep and moderate consumption of caffeine contribute significantly
to wellbeing, according to numerous longitudinal studies.

The philosopher argued that knowledge begins with curiosity, develops through doubt, and matures
through responsibility. Her students objected: surely experiment, observation and measurement
matter more than attitude? She smiled. Without curiosity, she replied, nobody would bother to
measure anything at all.

Travel diary, Lisbon: narrow streets climb steep hills; yellow trams rattle past tiled facades;
pastries filled with custard are sold warm in tiny bakeries. In the evening, melancholic fado
songs drift from crowded taverns while the lighthouse blinks across the estuary.

template <typename T>
class RingBuffer {
 public:
  explicit RingBuffer(size_t capacity) : data_(capacity) {}
  bool Push(const T& value) {
    if (size_ == data_.size()) return false;
    data_[(head_ + size_++) % data_.size()] = value;
    return true;
  }
 private:
  std::vector<T> data_;
  size_t head_ = 0, size_ = 0;
};

git commit -m "Fix off-by-one error in pagination" && git push origin feature/pagination
curl -s https://example.com/api/v1/items?page=2&limit=50 | jq '.items[] | .name'

Economics vocabulary: inflation, unemployment, productivity, interest rates, exchange rates,
supply and demand, fiscal policy, monetary policy, recession, recovery, investment, savings,
consumption, taxation, subsidies, tariffs, competition, monopoly, regulation, innovation.

Zoology: octopuses have three hearts and blue blood; elephants communicate with low-frequency
rumbles; hummingbirds hover by beating their wings up to eighty times each second; penguins
cannot fly but swim remarkably fast; chameleons change colour to regulate temperature.

北京是中国的首都，有很多历史悠久的建筑。
学习编程需要耐心和练习。
京都には古いお寺がたくさんあります。

She opened the window and looked at the street below. A bus stopped, a few passengers got off,
and a man with a red umbrella hurried across the road. Somewhere a dog was barking. The city
was waking up, and she felt, for the first time in weeks, that the day belonged to her.
)CORPUS";

}  // namespace

std::string_view TrainingCorpus() { return std::string_view(kCorpus, sizeof(kCorpus) - 1); }

}  // namespace stepserve::synth
